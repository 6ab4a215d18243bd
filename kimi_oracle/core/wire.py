"""Plain data across a process boundary: tensors as (dtype, shape, bytes), and a loader that builds
no object of any class.

What comes back from a process that runs user code (an engine's executor) is untrusted: a pickle
may name any class, so that loading it imports the user's module in this process and runs its
code, and a `torch.Tensor` subclass may answer `torch.equal` (or anything else) as it likes.
`pack_tensor` reads a tensor's dtype, shape and bytes through torch's own methods with every
`__torch_function__` override switched off, and `loads` accepts only a pickle of builtins (None,
bools, ints, floats, strings, bytes, tuples, lists, dicts, sets): any class reference is refused
before anything is built. `unpack_tensor` makes a plain tensor of the bytes again.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import torch

from kimi_oracle.core.errors import CandidateError

# The dtypes a tensor may travel as (torch's names): numbers only.
_DTYPES = {"float16", "bfloat16", "float32", "float64", "uint8", "int8", "int16", "int32", "int64", "bool",
           "uint16", "uint32", "uint64"}


class _NoClasses(pickle.Unpickler):
    """An unpickler that refuses every global: classes, functions, modules."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused: the data names {module}.{name}; only plain data may cross")


def dumps(data: Any) -> bytes:
    """Pickle plain data (the other side loads it with `loads`)."""
    return pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)


def loads(blob: bytes, what: str = "the executor") -> Any:
    """Plain data from `blob`; CandidateError when it names any class (or is not a pickle)."""
    try:
        return _NoClasses(io.BytesIO(blob)).load()
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001 - refused, truncated or not a pickle at all
        raise CandidateError(f"{what} answered with data that is not plain data: {type(exc).__name__}: {exc}") from None


def plain_tensor(t: Any, what: str = "tensor") -> torch.Tensor:
    """A plain, contiguous CPU `torch.Tensor` holding `t`'s values (of any subclass), made by
    torch's own methods with `__torch_function__` switched off; CandidateError for anything that
    is not a readable tensor of a comparable dtype."""
    if not isinstance(t, torch.Tensor):
        raise CandidateError(f"{what} is a {type(t).__name__}, not a torch.Tensor")
    try:
        with torch._C.DisableTorchFunction():
            base = torch.Tensor.contiguous(torch.Tensor.cpu(torch.Tensor.detach(t)))
            if type(base) is not torch.Tensor:  # (a wrapper subclass that survives: copied to plain data)
                base = torch.Tensor.clone(base).as_subclass(torch.Tensor)
    except Exception as exc:  # noqa: BLE001 - a tensor whose storage cannot be read (a wrapper subclass)
        raise CandidateError(f"{what}: its bytes cannot be read ({type(exc).__name__}: {exc})") from None
    if str(base.dtype).replace("torch.", "") not in _DTYPES:
        raise CandidateError(f"{what} has dtype {str(base.dtype).replace('torch.', '')}, which cannot be compared")
    return base


def pack_tensor(t: Any, what: str = "tensor") -> tuple[str, tuple[int, ...], bytes]:
    """(dtype name, shape, bytes) of a tensor (of any subclass), read through `plain_tensor`."""
    base = plain_tensor(t, what)
    try:
        flat = base.reshape(-1)
        data = bytes(flat.view(torch.uint8).numpy()) if flat.numel() else b""
    except Exception as exc:  # noqa: BLE001 - storage that cannot be viewed as bytes
        raise CandidateError(f"{what}: its bytes cannot be read ({type(exc).__name__}: {exc})") from None
    return str(base.dtype).replace("torch.", ""), tuple(int(n) for n in base.shape), data


def unpack_tensor(packed: Any, what: str = "tensor") -> torch.Tensor:
    """A plain tensor of `pack_tensor`'s triple (its bytes copied); CandidateError when the triple
    does not hold together."""
    try:
        dtype_name, shape, data = packed
        if dtype_name not in _DTYPES or not isinstance(data, (bytes, bytearray)):
            raise ValueError(f"dtype {dtype_name!r}")
        shape = tuple(int(n) for n in shape)
        dtype = getattr(torch, dtype_name)
        if not data:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)
    except Exception as exc:  # noqa: BLE001 - forged or truncated
        raise CandidateError(f"{what}: not a (dtype, shape, bytes) triple that holds together: "
                             f"{type(exc).__name__}: {exc}") from None


__all__ = ["dumps", "loads", "pack_tensor", "plain_tensor", "unpack_tensor"]
