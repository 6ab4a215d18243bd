"""Candidates: the implementations under test, named by a spec string.

A spec is a built-in name (`reference`, `gpu`, `eager`), `package.module:function`, or
`path/to/file.py:function`. The function takes `(images: list[PIL.Image.Image], config)` and
returns a `PreprocessResult` or a `(pixel_values, grid_thws)` pair (torch tensors or NumPy
arrays). Loading problems and wrong return types are harness errors (`CandidateError`, exit 2);
an exception raised by the candidate on a valid input is a finding (`CandidateCrash`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import BackendError, CandidateError
from kimi_oracle.core.result import PreprocessResult

CandidateFn = Callable[[list, PreprocessConfig], Any]

BUILTINS = {
    "reference": ("kimi_oracle.pipelines.reference", "preprocess", "the CPU reference (the checkpoint's arithmetic)"),
    "gpu": ("kimi_oracle.pipelines.gpu", "preprocess_drawn_tiles", "the Triton GPU pipeline (Triton interpreter on CPU)"),
    "eager": ("kimi_oracle.pipelines.eager", "preprocess", "the serving engine's eager torch path"),
}


class CandidateCrash(Exception):
    """The candidate raised on a valid input: recorded as a `crash` finding, not a harness error."""

    def __init__(self, spec: str, exc: BaseException):
        self.spec = spec
        self.exc_type = type(exc).__name__
        self.exc_message = str(exc)
        self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        super().__init__(f"candidate {spec!r} raised {self.exc_type}: {self.exc_message}")


@dataclass
class Candidate:
    """A loaded candidate: call it with images and a config to get a validated result."""

    spec: str
    func: CandidateFn
    description: str = ""

    @property
    def name(self) -> str:
        """The spec, as reports show it."""
        return self.spec

    def __call__(self, images: Sequence[Image.Image], config: PreprocessConfig) -> PreprocessResult:
        """Run on copies of `images`; raise CandidateCrash if it raises, CandidateError if it
        returns something that is not a result."""
        copies = [img.copy() for img in images]
        for img, src in zip(copies, images):
            img.info = dict(src.info)
        try:
            out = self.func(copies, config)
        except (CandidateError, BackendError):
            raise
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # the candidate's own failure on this input
            raise CandidateCrash(self.spec, exc) from exc
        return as_result(out, self.spec)


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


def _load_module_file(path: Path) -> Any:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"_kimi_candidate_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CandidateError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # The candidate's own directory first, so that it can import its sibling modules.
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise CandidateError(f"importing {path} failed: {type(exc).__name__}: {exc}") from None
    finally:
        try:
            sys.path.remove(str(path.resolve().parent))
        except ValueError:
            pass
    return module


def _import(module_name: str, spec: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CandidateError(f"candidate {spec!r}: no module named {module_name!r}") from None
        raise CandidateError(f"candidate {spec!r}: importing {module_name!r} failed: {exc}") from None
    except CandidateError:
        raise
    except Exception as exc:
        raise CandidateError(f"candidate {spec!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None


def load_candidate(spec: str) -> Candidate:
    """Resolve a spec string to a callable candidate, or raise CandidateError."""
    if not isinstance(spec, str) or not spec.strip():
        raise CandidateError("empty candidate spec; give a built-in (reference, gpu, eager), "
                             "package.module:function or path/to/file.py:function")
    spec = spec.strip()
    if spec in BUILTINS:
        module_name, attr, description = BUILTINS[spec]
        try:
            module = importlib.import_module(module_name)
            func = getattr(module, attr)
        except (ImportError, AttributeError) as exc:
            raise CandidateError(
                f"built-in candidate {spec!r} is not available in this installation: "
                f"{module_name}.{attr} cannot be imported ({type(exc).__name__}: {exc})"
            ) from None
        except BackendError as exc:
            raise CandidateError(f"built-in candidate {spec!r} cannot run here: {exc}") from None
        return Candidate(spec, func, description)
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise CandidateError(
            f"bad candidate spec {spec!r}: expected a built-in ({', '.join(BUILTINS)}), "
            "package.module:function or path/to/file.py:function"
        )
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target)
        if not path.is_file():
            raise CandidateError(f"candidate {spec!r}: no such file {path}")
        module = _load_module_file(path)
    else:
        module = _import(target, spec)
    func: Any = module
    for part in attr.split("."):
        try:
            func = getattr(func, part)
        except AttributeError:
            raise CandidateError(f"candidate {spec!r}: {target} has no attribute {attr!r}") from None
    if not callable(func):
        raise CandidateError(f"candidate {spec!r}: {attr} is not callable")
    doc = (getattr(func, "__doc__", None) or "").strip().splitlines()
    return Candidate(spec, func, doc[0] if doc else "")


__all__ = ["BUILTINS", "Candidate", "CandidateCrash", "as_result", "load_candidate"]
