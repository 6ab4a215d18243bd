"""Candidates: the implementations under test, named by a spec string.

A spec is a built-in name (`reference`, `gpu`, `eager`, ...), the name of an entry point of the
`kimi_oracle.candidates` group (an installed engine's package registers its candidates there),
`package.module:function`, `path/to/file.py:function`, or a module alone (`package.module`,
`path/to/file.py`) that has a `preprocess` function. The function takes
`(images: list[PIL.Image.Image], config)` and returns a `PreprocessResult` or a
`(pixel_values, grid_thws)` pair (torch tensors or NumPy arrays). Loading problems and wrong
return types are harness errors (`CandidateError`, exit 2); an exception raised by the candidate
on a valid input is a finding (`CandidateCrash`).

A module (or an entry point's object) with both `plan` and `preprocess` is an engine that
advertises its own plans: each result's grids and row count are also checked against its own
plan of the same images (`checks.self_check`, the engine's self-check); a difference raises
`SelfCheckFailed`, whose `check` is `grid_mismatch` or `feature_length`. `as_plan` normalizes what
a planner returns (see `oracle.planner`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import numbers
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image

from kimi_oracle.adapters.engines import engine_candidate, is_engine_spec
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import BackendError, CandidateError, InputError
from kimi_oracle.core.files import read_file
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.specs import spec_path, split_spec
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.checks import _describe, as_result, self_check
from kimi_oracle.oracle.input_forms import accepted_forms, hand_over, resolve_form

CandidateFn = Callable[[list, PreprocessConfig], Any]
PlannerFn = Callable[[int, int, PreprocessConfig], Any]
# Installed packages register named candidates and planners in this entry-point group.
ENTRY_POINT_GROUP = "kimi_oracle.candidates"

BUILTINS = {
    "reference": ("kimi_oracle.pipelines.reference", "preprocess", "the CPU reference (the checkpoint's arithmetic)"),
    "gpu": ("kimi_oracle.pipelines.gpu", "preprocess_drawn_tiles", "the Triton GPU pipeline (Triton interpreter on CPU)"),
    "eager": ("kimi_oracle.pipelines.eager", "preprocess", "the serving engine's eager torch path"),
    "sglang-0.5.23": ("kimi_oracle.pipelines.engines.sglang_0_5_23", "preprocess",
                      "model of SGLang 0.5.23's K3 deferred GPU path (bit-identical on CPU tensors); alias: eager"),
}


class CandidateCrash(Exception):
    """The candidate raised on a valid input: recorded as a `crash` finding, not a harness error."""

    def __init__(self, spec: str, exc: BaseException):
        self.spec = spec
        self.exc_type = type(exc).__name__
        self.exc_message = str(exc)
        self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        super().__init__(f"candidate {spec!r} raised {self.exc_type}: {self.exc_message}")


class SelfCheckFailed(CandidateCrash):
    """The candidate's result disagrees with its own plan (the engine's self-check failed): a
    `grid_mismatch` or `feature_length` finding, named by `check`."""

    def __init__(self, spec: str, check: str, message: str, stats: dict[str, Any]):
        Exception.__init__(self, message)
        self.spec = spec
        self.exc_type = "SelfCheckFailed"
        self.exc_message = message
        self.traceback = ""
        self.check = check
        self.stats = stats


class DeferredCall:
    """`Candidate.start_call`'s call: runs the candidate once, on the first `.result()`."""

    def __init__(self, candidate: "Candidate", images: list[Image.Image], config: PreprocessConfig):
        self.candidate, self.images, self.config = candidate, images, config
        self.done = False
        self._outcome: tuple[PreprocessResult | None, BaseException | None] = (None, None)

    def result(self) -> PreprocessResult:
        """The candidate's result (CandidateCrash when it raised; raised again on a second ask)."""
        if not self.done:
            try:
                self._outcome = (self.candidate(self.images, self.config), None)
            except CandidateCrash as exc:
                self._outcome = (None, exc)
            self.done = True
        result, error = self._outcome
        if error is not None:
            raise error
        assert result is not None
        return result


@dataclass
class Candidate:
    """A loaded candidate: call it with images and a config to get a validated result.

    `plan`, when set, is the candidate's own planner `(width, height, config) -> plan`: every
    result is then also checked against it (the engine's self-check)."""

    spec: str
    func: CandidateFn
    description: str = ""
    plan: PlannerFn | None = None
    # "pil", "bytes" or "both" (oracle.input_forms); None: the candidate's default.
    input_form: str | None = None

    @property
    def name(self) -> str:
        """The spec, as reports show it."""
        return self.spec

    @property
    def accepts(self) -> tuple[str, ...]:
        """The input forms the candidate's function declares (`oracle.input_forms`)."""
        return accepted_forms(self.func)

    def use_input_form(self, form: str | None) -> str:
        """Set the input form (None: its default); CandidateError when it does not take it."""
        self.input_form = resolve_form(self.accepts, form, self.spec)
        return self.input_form

    def __call__(self, images: Sequence[Image.Image], config: PreprocessConfig) -> PreprocessResult:
        """Run on copies of `images`; raise CandidateCrash if it raises, CandidateError if it
        returns something that is not a result."""
        copies = hand_over(images, self.input_form or resolve_form(self.accepts, None, self.spec))
        try:
            out = self.func(copies, config)
        except (CandidateError, BackendError):
            raise
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # the candidate's own failure on this input
            raise CandidateCrash(self.spec, exc) from exc
        result = as_result(out, self.spec)
        if self.plan is not None:
            self._self_check(result, images, config)
        return result

    def start_call(self, images: Sequence[Image.Image], config: PreprocessConfig) -> "DeferredCall":
        """A call whose `.result()` runs the candidate: in this process nothing can overlap it,
        so it runs when its result is asked for (after the reference, as `evaluate` orders them).
        An executor's candidate (`fuzzers.sandbox`) starts working at once instead."""
        return DeferredCall(self, list(images), config)

    def _self_check(self, result: PreprocessResult, images: Sequence[Image.Image], config: PreprocessConfig) -> None:
        sizes = [img.size for img in images]
        plans = []
        for w, h in sizes:
            try:
                out = self.plan(w, h, config)
            except (CandidateError, BackendError, KeyboardInterrupt):
                raise
            except Exception as exc:  # its planner refuses a size its preprocess accepted
                raise CandidateCrash(self.spec, exc) from exc
            plans.append(as_plan(out, config, self.spec, (w, h)).plan)
        verdict = self_check(result, plans, sizes)
        if not verdict.ok:
            raise SelfCheckFailed(self.spec, str(verdict.check), verdict.message, verdict.stats)


# ---------------------------------------------------------------------------------------------
# plans: what a planner returns


# The engine's dict shape (SGLang's resize config): these keys, the grid derived from them.
ENGINE_PLAN_KEYS = ("new_width", "new_height", "pad_width", "pad_height", "num_tokens")
# The project's plan object's fields (`core.geometry.ResizePlan`), in the order they are compared.
PLAN_FIELDS = ("new_w", "new_h", "pad_w", "pad_h", "grid_thw", "num_tokens")
_ENGINE_NAMES = {"new_w": "new_width", "new_h": "new_height", "pad_w": "pad_width", "pad_h": "pad_height",
                 "grid_thw": "grid_thw (derived)", "num_tokens": "num_tokens"}


@dataclass(frozen=True)
class PlanShape:
    """A planner's answer normalized to a `ResizePlan`, with the names its own shape gives the
    fields (`new_width` for the engine dict) so that a finding names the field as returned."""

    plan: ResizePlan
    shape: str  # "plan" (a ResizePlan or an object with its fields), "engine" (the dict), "dict"
    names: dict[str, str]


def _int_field(value: Any, spec: str, field_name: str, size: tuple[int, int] | None) -> int:
    # Python and NumPy integers; a float, a bool or a tensor is a shape error, not a plan.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        at = f" for {size[0]}x{size[1]}" if size else ""
        shown = repr(value) if isinstance(value, (int, float, str)) else _describe(value)
        raise CandidateError(f"planner {spec!r}: {field_name} is {shown}{at}; expected an integer")
    return int(value)


def as_plan(out: Any, config: PreprocessConfig, spec: str = "planner",
            size: tuple[int, int] | None = None) -> PlanShape:
    """Normalize a planner's return value, or raise CandidateError saying what was wrong.

    Accepted: a `ResizePlan` (or any object with its fields `new_w`, `new_h`, `pad_w`, `pad_h`,
    `grid_thw`, `num_tokens`); the engine's dict `{num_tokens, new_width, new_height, pad_width,
    pad_height}`, whose grid is derived as `(1, (new_height + pad_height) // p, (new_width +
    pad_width) // p)` (a `grid_thw` key, when present, is taken as given); a dict with the
    `ResizePlan` field names (`grid_thw` derived likewise when absent).
    """
    p = config.patch_size
    if isinstance(out, ResizePlan):
        return PlanShape(out, "plan", {f: f for f in PLAN_FIELDS})
    if isinstance(out, dict):
        keys = set(out)
        if set(ENGINE_PLAN_KEYS) <= keys:
            shape, names = "engine", dict(_ENGINE_NAMES)
            get = {f: out[names[f]] for f in PLAN_FIELDS if f != "grid_thw"}
        elif {"new_w", "new_h", "pad_w", "pad_h", "num_tokens"} <= keys:
            shape, names = "dict", {f: f for f in PLAN_FIELDS}
            names["grid_thw"] = "grid_thw" if "grid_thw" in keys else "grid_thw (derived)"
            get = {f: out[f] for f in PLAN_FIELDS if f != "grid_thw"}
        else:
            raise CandidateError(
                f"planner {spec!r} returned a dict with keys {sorted(map(str, keys))[:12]}; expected the engine's "
                f"{{{', '.join(ENGINE_PLAN_KEYS)}}} or a ResizePlan's fields")
        grid = out.get("grid_thw", out.get("grid_thws")) if shape == "engine" else out.get("grid_thw")
        if grid is not None:
            names["grid_thw"] = "grid_thw"
    elif all(hasattr(out, f) for f in PLAN_FIELDS):
        shape, names = "plan", {f: f for f in PLAN_FIELDS}
        get = {f: getattr(out, f) for f in PLAN_FIELDS if f != "grid_thw"}
        grid = getattr(out, "grid_thw")
    else:
        raise CandidateError(f"planner {spec!r} returned {_describe(out)}; expected a ResizePlan, the engine's dict "
                             f"{{{', '.join(ENGINE_PLAN_KEYS)}}} or a dict with a ResizePlan's fields")
    values = {f: _int_field(v, spec, names[f], size) for f, v in get.items()}
    if grid is None:
        grid_thw = (1, (values["new_h"] + values["pad_h"]) // p, (values["new_w"] + values["pad_w"]) // p)
    else:
        if isinstance(grid, (torch.Tensor, np.ndarray)):
            grid = grid.reshape(-1).tolist()
        if not isinstance(grid, (tuple, list)) or len(grid) != 3:
            raise CandidateError(f"planner {spec!r}: grid_thw is {_describe(grid)}; expected three integers")
        grid_thw = tuple(_int_field(v, spec, "grid_thw", size) for v in grid)
    plan = ResizePlan(values["new_w"], values["new_h"], values["pad_w"], values["pad_h"],
                      grid_thw, values["num_tokens"])  # type: ignore[arg-type]
    return PlanShape(plan, shape, names)


# A candidate's or planner's source file is read at most this large (core.files.read_file).
MAX_SOURCE_BYTES = 16 << 20


def _load_module_file(path: Path) -> Any:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"_kimi_candidate_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CandidateError(f"cannot load {path} as a Python module")
    try:  # the one reader of user files: a regular file, capped (never a FIFO or /dev/zero)
        source = read_file(path, max_bytes=MAX_SOURCE_BYTES)
    except InputError as exc:
        raise CandidateError(f"cannot load {path}: {exc.reason}") from None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # The candidate's own directory first, so that it can import its sibling modules.
    sys.path.insert(0, str(path.resolve().parent))
    try:
        # (the bytes read above are what runs: the file is not read a second time)
        exec(compile(source, str(path), "exec"), module.__dict__)
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


def entry_points() -> dict[str, Any]:
    """The installed entry points of the `kimi_oracle.candidates` group, by name."""
    try:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # noqa: BLE001 - broken metadata of some installed package: no plug-ins
        return {}
    return {ep.name: ep for ep in found}


_SPEC_FORMS = ("package.module:function, path/to/file.py:function, package.module or path/to/file.py, "
               f"or an installed entry point of the {ENTRY_POINT_GROUP} group")


def resolve(spec: str, what: str = "candidate") -> Any:
    """The object a spec that is not a built-in names: an entry point's object, a function
    (`target:attr`) or a module (`package.module`, `path/to/file.py`); CandidateError otherwise."""
    target, attr = split_spec(spec)
    sep = ":" in spec
    is_path = spec_path(spec) is not None
    plugins = {} if is_path else entry_points()
    if spec in plugins:
        ep = plugins[spec]
        try:
            return ep.load()
        except Exception as exc:  # noqa: BLE001 - whatever the plug-in's import raises
            raise CandidateError(f"{what} {spec!r}: entry point {ep.value!r} of {ENTRY_POINT_GROUP} cannot be "
                                 f"loaded: {type(exc).__name__}: {exc}") from None
    if sep and (not target or not attr):
        raise CandidateError(f"bad {what} spec {spec!r}: expected a built-in ({', '.join(BUILTINS)}), {_SPEC_FORMS}")
    if is_path:
        path = Path(target)
        if not path.exists():
            raise CandidateError(f"{what} {spec!r}: no such file {path}")
        module = _load_module_file(path)  # (a FIFO, a device or a directory is refused there)
    elif not sep and (not all(part.isidentifier() for part in target.split("."))
                      or ("." not in target and importlib.util.find_spec(target) is None)):
        raise CandidateError(f"bad {what} spec {spec!r}: not a built-in ({', '.join(BUILTINS)}), not an "
                             f"installed entry point of {ENTRY_POINT_GROUP}, not a module; expected {_SPEC_FORMS}")
    elif all(part.isidentifier() for part in target.split(".")):
        module = _import(target, spec)
    else:
        raise CandidateError(f"bad {what} spec {spec!r}: expected a built-in ({', '.join(BUILTINS)}), {_SPEC_FORMS}")
    obj: Any = module
    for part in attr.split(".") if attr else ():
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CandidateError(f"{what} {spec!r}: {target} has no attribute {attr!r}") from None
    return obj


def first_doc_line(obj: Any) -> str:
    """The first line of an object's docstring ("" when it has none)."""
    doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
    return doc[0] if doc else ""


def is_engine(obj: Any) -> bool:
    """A module or object (not a function) with a callable `preprocess`."""
    return not inspect.isroutine(obj) and callable(getattr(obj, "preprocess", None))


def stripped_spec(spec: Any, empty: str) -> str:
    """`spec` without surrounding blanks; CandidateError(`empty`) when it is no string or blank."""
    if not isinstance(spec, str) or not spec.strip():
        raise CandidateError(empty)
    return spec.strip()


def named_function(obj: Any, what: str, spec: str, function: str,
                   describe: Callable[[Any], str] = _describe) -> Any:
    """`obj`, resolved from a `what` spec, when it is a callable that is no module; else a
    CandidateError saying to name its `function` (module:function) or what it is instead."""
    if inspect.ismodule(obj):
        raise CandidateError(f"{what} {spec!r}: module {obj.__name__} has no {function} function; "
                             "name the function (module:function)")
    if not callable(obj):
        raise CandidateError(f"{what} {spec!r}: {describe(obj)} is not callable")
    return obj


def load_candidate(spec: str) -> Candidate:
    """Resolve a spec string to a callable candidate, or raise CandidateError."""
    spec = stripped_spec(spec, f"empty candidate spec; give a built-in ({', '.join(BUILTINS)}), {_SPEC_FORMS}")
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
    if is_engine_spec(spec):  # a real engine's own image path (`sglang@0.5.23`: kimi_oracle.adapters)
        func, description, plan = engine_candidate(spec)
        return Candidate(spec, func, description, plan)
    obj = resolve(spec, "candidate")
    if is_engine(obj):
        plan = getattr(obj, "plan", None)
        return Candidate(spec, obj.preprocess, first_doc_line(obj.preprocess) or first_doc_line(obj),
                         plan if callable(plan) else None)
    return Candidate(spec, named_function(obj, "candidate", spec, "preprocess"), first_doc_line(obj))


__all__ = ["BUILTINS", "ENGINE_PLAN_KEYS", "ENTRY_POINT_GROUP", "PLAN_FIELDS", "Candidate", "CandidateCrash", "DeferredCall", "PlanShape",
           "SelfCheckFailed", "as_plan", "as_result", "entry_points", "first_doc_line", "is_engine", "load_candidate",
           "named_function", "resolve", "stripped_spec"]
