"""The GPU backend: importing the Triton kernels once, and the device a call runs on."""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import threading
from typing import Any

import torch

from kimi_oracle.core.errors import BackendError
from kimi_oracle.pipelines.gpu import resample as rs

_KERNELS: Any = None
_KERNELS_INTERPRETED: bool | None = None
_LOCK = threading.Lock()


def _kernels() -> Any:
    global _KERNELS, _KERNELS_INTERPRETED
    with _LOCK:
        if _KERNELS is None:
            try:
                _KERNELS = importlib.import_module("kimi_oracle.pipelines.gpu.kernels")
            except ImportError as exc:
                raise BackendError(f"the GPU pipeline needs triton, which cannot be imported: {exc}") from None
            _KERNELS_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
            if _KERNELS_INTERPRETED:
                _skip_discarded_overflow_checks()
    return _KERNELS


def _skip_discarded_overflow_checks() -> bool:
    """Triton's interpreter computes an overflow check for every 32-bit integer add, sub and mul
    (`sanitize_overflow`, on by default) and then drops it: a device assert acts only with `debug`
    on, which the interpreter's options leave off (Triton 3.9: no knob, jit argument or launch
    keyword reaches them). That dead work was 29 % of an interpreted test's time (the pass-order
    shapes, 26.5 -> 18.8 s side by side, docs/gpu.md), so with debug off it is not done: the result
    is the same (int32 wraps, as on the device). The options are the interpreter's, for the whole
    process: whoever turns `debug` on later must turn `sanitize_overflow` on again with it. Returns
    whether it was turned off; a Triton without these options, or whose options can assert
    without `debug` (an `enable_assertions` option), is left as it is."""
    interp = sys.modules.get("triton.runtime.interpreter")
    builder = getattr(interp, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if (not dataclasses.is_dataclass(options) or getattr(options, "debug", True)
            or getattr(options, "enable_assertions", False) or not getattr(options, "sanitize_overflow", False)):
        return False
    builder.options = dataclasses.replace(options, sanitize_overflow=False)
    return True


def resolve_device(device: str | torch.device | None) -> torch.device:
    """CUDA when available (or asked for), else CPU tensors under the Triton interpreter."""
    rs.check_pillow()
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BackendError("device 'cuda' requested but torch sees no CUDA device")
        if os.environ.get("TRITON_INTERPRET") == "1":
            raise BackendError("TRITON_INTERPRET=1 is set: kernels would run on the host, not CUDA")
        if dev.index is None:
            # The current device, by its index: the tensors made on `cuda` report `cuda:N`, and
            # `torch.device("cuda") != torch.device("cuda:0")` (the output's device is compared
            # with this one, and the device tables are cached by its name).
            dev = torch.device("cuda", torch.cuda.current_device())
    elif dev.type == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise BackendError(
                "no CUDA device: the GPU pipeline can run on CPU tensors only under the Triton "
                "interpreter; set TRITON_INTERPRET=1 before anything imports triton"
            )
    else:
        raise BackendError(f"unsupported device type {dev.type!r} (use cuda or cpu)")
    _kernels()
    if dev.type == "cpu" and not _KERNELS_INTERPRETED:
        raise BackendError("triton kernels were compiled before TRITON_INTERPRET=1 was set; set it first")
    return dev
