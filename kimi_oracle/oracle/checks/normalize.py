"""A candidate's return value read as a PreprocessResult, and a grid table read as rows."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.result import PreprocessResult


# Result normalization lives here (re-exported by `oracle.candidates`, whose public name it is)
# so that candidates can import the checks without a cycle.
def as_result(out: Any, spec: str = "candidate") -> PreprocessResult:
    """Normalize a candidate's return value, or raise CandidateError saying what was wrong."""
    if isinstance(out, PreprocessResult):
        pixel_values, grid_thws = out.pixel_values, out.grid_thws
    elif isinstance(out, (tuple, list)) and len(out) == 2:
        pixel_values, grid_thws = out
    elif hasattr(out, "pixel_values") and hasattr(out, "grid_thws"):
        pixel_values, grid_thws = out.pixel_values, out.grid_thws
    else:
        raise CandidateError(
            f"candidate {spec!r} returned {_describe(out)}; expected a PreprocessResult or a "
            "(pixel_values, grid_thws) pair"
        )
    return PreprocessResult(_tensor(pixel_values, spec, "pixel_values"), _tensor(grid_thws, spec, "grid_thws"))


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__module__}.{type(value).__qualname__}" if value is not None else "None"


def _tensor(value: Any, spec: str, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise CandidateError(f"candidate {spec!r}: {name} is an object array, expected numbers")
        return torch.from_numpy(np.ascontiguousarray(value))
    raise CandidateError(f"candidate {spec!r}: {name} is {_describe(value)}, expected a torch tensor or NumPy array")


def _coerce(result: Any) -> PreprocessResult:
    if isinstance(result, PreprocessResult):
        return result
    return as_result(result)


_INT_DTYPES = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8})


def _grid_rows(grids: torch.Tensor) -> list[tuple[Any, ...]] | None:
    """Grid rows as Python numbers, or None when the table does not have (n, 3) shape."""
    if grids.ndim != 2 or grids.shape[1] != 3:
        return None
    if grids.dtype in _INT_DTYPES:  # tolist() gives ints already
        return [tuple(row) for row in grids.tolist()]
    rows = []
    for row in grids.tolist():
        rows.append(tuple(int(v) if float(v).is_integer() else v for v in row))
    return rows


def _rows_of(grid: Sequence[Any]) -> int:
    t, h, w = grid
    return int(t) * int(h) * int(w)
