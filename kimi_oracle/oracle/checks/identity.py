"""Bit identity of two results: `same_output`, and the digest that agrees with it."""

from __future__ import annotations

from typing import Any

import torch

from kimi_oracle.core.result import PreprocessResult


def update_digest(h: Any, result: PreprocessResult) -> None:
    """Feed a result's grids and pixel values (shape, dtype and bytes) to a hashlib object: equal
    digests for bit-identical results (`same_output`)."""
    for t in (result.grid_thws, result.pixel_values):
        t = torch.as_tensor(t).detach().cpu().contiguous()
        h.update(str((tuple(t.shape), t.dtype)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def same_output(a: Any, b: Any) -> bool:
    """Two results with the same dtypes, shapes and bytes, pixel values and grids alike (NaN
    payloads and signed zeros told apart): bit-identical outputs."""
    if not isinstance(a, PreprocessResult) or not isinstance(b, PreprocessResult):
        return False
    for x, y in ((a.pixel_values, b.pixel_values), (a.grid_thws, b.grid_thws)):
        x, y = torch.as_tensor(x).detach().cpu(), torch.as_tensor(y).detach().cpu()
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if x.numel() and not torch.equal(x.contiguous().reshape(-1).view(torch.uint8),
                                         y.contiguous().reshape(-1).view(torch.uint8)):
            return False
    return True
