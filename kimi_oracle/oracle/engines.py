"""Engines (request layers) under test: specs, loading, and running a program of requests on one.

An engine spec is a built-in (`ENGINE_BUILTINS`), an entry point of the `kimi_oracle.engines`
group, `package.module:attr`, `path/to/file.py:attr`, or a module (or file) with an `engine`
attribute. It resolves to a factory `engine(config, tokenizer) -> Engine` (docs/adapters.md,
"Request-layer engines"): `paths`, `prepare(prompt_ids, images, paths) -> (input_ids, items)`,
`encode(items, dp_size) -> Tensor`, optionally `configure(config)`. Items are any objects with
attributes or dict keys `grid_thw` and `offsets`.

`run_program` plays a program (configure / prepare / encode steps, built by
`inputs.scenarios`) on a fresh engine and records what it returned (`Trace`), and each image's
rows prepared and encoded alone in a fresh engine of the config in force: what the request
checks (`oracle.request_checks`) judge. It runs in the engine's executor process
(`fuzzers.engine_sandbox`) or, for library callers, in this one.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import numbers
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from PIL import Image

from kimi_oracle.adapters.engines import engine_request_layer, is_engine_spec
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.tokenizer import Tokenizer
from kimi_oracle.core.wire import pack_tensor, plain_tensor, unpack_tensor
from kimi_oracle.oracle.candidates import first_doc_line, resolve, stripped_spec
from kimi_oracle.pipelines.request_contract import Step

ENGINE_ENTRY_POINT_GROUP = "kimi_oracle.engines"
ENGINE_BUILTINS = {
    "sglang-0.5.23": ("kimi_oracle.pipelines.engines.sglang_0_5_23_requests", "engine",
                      "model of SGLang 0.5.23's kimi_k3 request layer (spans, cache, deferred/eager items, dp ranks)"),
}
DEFAULT_PATHS = ("default",)
_SPEC_FORMS = (f"a built-in ({', '.join(ENGINE_BUILTINS)}), an entry point of {ENGINE_ENTRY_POINT_GROUP}, "
               "package.module:attr, path/to/file.py:attr, or a module with an `engine` factory")


@dataclass(frozen=True)
class EngineFactory:
    """A loaded engine spec: `factory(config, tokenizer)` makes a fresh engine."""

    spec: str
    factory: Callable[[PreprocessConfig, Any], Any]
    description: str = ""

    def __call__(self, config: PreprocessConfig, tokenizer: Any) -> Any:
        return self.factory(config, tokenizer)


def _resolve(spec: str) -> Any:
    # The engines' own entry points first; the other forms resolve as candidate specs do.
    try:
        found = {ep.name: ep for ep in importlib.metadata.entry_points(group=ENGINE_ENTRY_POINT_GROUP)}
    except Exception:  # noqa: BLE001 - broken metadata of some installed package: no plug-ins
        found = {}
    if spec in found:
        try:
            return found[spec].load()
        except Exception as exc:  # noqa: BLE001 - whatever the plug-in's import raises
            raise CandidateError(f"engine {spec!r}: entry point {found[spec].value!r} cannot be loaded: "
                                 f"{type(exc).__name__}: {exc}") from None
    try:
        obj = resolve(spec, "engine")
    except CandidateError as exc:
        if str(exc).startswith("bad engine spec"):
            raise CandidateError(f"bad engine spec {spec!r}: expected {_SPEC_FORMS}") from None
        raise
    if inspect.ismodule(obj):
        if not callable(getattr(obj, "engine", None)):
            raise CandidateError(f"engine {spec!r}: module {obj.__name__} has no engine factory; name it (module:attr)")
        return obj.engine
    return obj


def load_engine(spec: str) -> EngineFactory:
    """Resolve an engine spec to its factory, or raise CandidateError (exit 2)."""
    spec = stripped_spec(spec, f"empty engine spec; give {_SPEC_FORMS}")
    if spec in ENGINE_BUILTINS:
        module_name, attr, description = ENGINE_BUILTINS[spec]
        return EngineFactory(spec, getattr(importlib.import_module(module_name), attr), description)
    if is_engine_spec(spec):  # a real engine's request layer, its own code (kimi_oracle.adapters)
        factory, description = engine_request_layer(spec)
        return EngineFactory(spec, factory, description)
    obj = _resolve(spec)
    if inspect.ismodule(obj) or not callable(obj):
        raise CandidateError(f"engine {spec!r}: {obj!r} is not a factory engine(config, tokenizer)")
    return EngineFactory(spec, obj, first_doc_line(obj))


# ---------------------------------------------------------------------------------------------
# items


def item_field(item: Any, name: str) -> Any:
    """`item[name]` for a mapping, else `item.name`."""
    if isinstance(item, dict):
        if name not in item:
            raise CandidateError(f"engine item has no key {name!r} (keys: {sorted(map(str, item))[:8]})")
        return item[name]
    try:
        return getattr(item, name)
    except AttributeError:
        raise CandidateError(f"engine item {type(item).__name__} has no attribute {name!r}") from None


def _ints(value: Any, n: int, what: str) -> tuple[int, ...]:
    if isinstance(value, torch.Tensor):
        value = value.reshape(-1).tolist()
    if not isinstance(value, (list, tuple)) or len(value) != n or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value):
        raise CandidateError(f"engine item's {what} is {value!r}; expected {n} integers")
    return tuple(int(v) for v in value)


def item_grid(item: Any) -> tuple[int, int, int]:
    """The item's grid_thw as three ints."""
    return _ints(item_field(item, "grid_thw"), 3, "grid_thw")  # type: ignore[return-value]


def item_offsets(item: Any) -> tuple[int, int]:
    """The item's inclusive (start, end) pad run."""
    return _ints(item_field(item, "offsets"), 2, "offsets")  # type: ignore[return-value]


def engine_paths(engine: Any) -> tuple[str, ...]:
    """The engine's routes for one image (`("default",)` when it names none)."""
    paths = getattr(engine, "paths", None)
    if paths is None:
        return DEFAULT_PATHS
    if isinstance(paths, str) or not all(isinstance(p, str) for p in paths) or not paths:
        raise CandidateError(f"engine paths must be a non-empty tuple of strings, got {paths!r}")
    return tuple(paths)


# ---------------------------------------------------------------------------------------------
# programs and traces


@dataclass
class Raised:
    """An exception the engine raised: type, message, traceback."""

    exc_type: str
    message: str
    traceback: str = ""

    @classmethod
    def of(cls, exc: BaseException) -> "Raised":
        return cls(type(exc).__name__, str(exc), "".join(traceback.format_exception(type(exc), exc,
                                                                                    exc.__traceback__))[-4000:])


@dataclass
class Prepared:
    """What `prepare` returned for one request (or what it raised)."""

    input_ids: list[int] = field(default_factory=list)
    grids: list[tuple[int, int, int]] = field(default_factory=list)
    offsets: list[tuple[int, int]] = field(default_factory=list)
    raised: Raised | None = None
    ids_error: str = ""  # input ids that are not integers (a float id is never truncated into one)


@dataclass
class Encoded:
    """What one `encode` call returned, or what it raised. `data` is the whole output as a plain
    tensor and `item_grids` each item's grid as it read after the call (an engine may write its
    own grid back into its items); `rows`, per member, is filled by the judge
    (`oracle.request_checks`), split by the checkpoint's grids, never by the engine's."""

    members: list[tuple[int, int]]
    dp_size: int
    total_rows: int = 0
    shape: tuple[int, ...] = ()
    data: torch.Tensor | None = None
    item_grids: list[tuple[int, int, int] | None] = field(default_factory=list)
    rows: list[torch.Tensor] | None = None
    raised: Raised | None = None


@dataclass
class Trace:
    """A program's run: per request, per encode call, and each image's rows alone."""

    paths: tuple[str, ...]
    prepared: dict[int, Prepared] = field(default_factory=dict)
    encoded: list[Encoded] = field(default_factory=list)
    alone: dict[tuple[int, int], torch.Tensor | Raised] = field(default_factory=dict)


def _grid_after(item: Any) -> tuple[int, int, int] | None:
    try:
        return item_grid(item)
    except CandidateError:  # the engine wrote something that is no grid: compared as such
        return None


def _encode(engine: Any, items: dict[int, list[Any]], step: Step) -> Encoded:
    # Members of a request whose prepare raised are left out (that raise is its own finding).
    members = [(r, i) for r, i in step.members if i < len(items.get(r, ()))]
    out = Encoded(members, step.dp_size)
    if not members:
        return out
    try:
        batch = [items[r][i] for r, i in members]
        rows = engine.encode(batch, step.dp_size)
    except CandidateError:
        raise
    except Exception as exc:  # the engine's own error on this batch: judged by the checks
        out.raised = Raised.of(exc)
        return out
    # Read as bytes through torch's own methods (a subclass's overrides switched off): what the
    # judge compares is the data, never an object of the engine's.
    # (copied now: the engine may reuse its buffer later in the program; packed once, by trace_to_wire)
    out.data = plain_tensor(rows, "engine encode's result").clone()
    out.shape = tuple(out.data.shape)
    out.total_rows = int(out.shape[0]) if out.shape else 0
    out.item_grids = [_grid_after(it) for it in batch]
    return out


def _ids(ids: Any) -> tuple[list[int], str]:
    """The prompt's ids as ints, or why they are not ids (a float, a bool, a float tensor)."""
    if isinstance(ids, torch.Tensor):
        plain = plain_tensor(ids, "prepare's input ids")
        dtype = str(plain.dtype).replace("torch.", "")
        if dtype.startswith(("float", "bfloat", "bool")):
            return [], f"the input ids are a {dtype} tensor; only integers are ids"
        ids = plain.reshape(-1).tolist()
    out = []
    for k, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            return [], f"input id at position {k} is {t!r} ({type(t).__name__}); only integers are ids"
        out.append(int(t))
    return out, ""


def _prepare(engine: Any, step: Step, table: Sequence[Image.Image]) -> tuple[Prepared, list[Any]]:
    out = Prepared()
    try:
        ids, items = engine.prepare(list(step.prompt_ids), [table[k].copy() for k in step.images], list(step.paths))
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001 - a raise on a valid request: a finding
        out.raised = Raised.of(exc)
        return out, []
    items = list(items)
    out.input_ids, out.ids_error = _ids(ids)
    out.grids = [item_grid(it) for it in items]
    out.offsets = [item_offsets(it) for it in items]
    return out, items


def alone_rows(factory: EngineFactory, tokenizer: Any, config: PreprocessConfig, img: Image.Image, path: str
               ) -> torch.Tensor | Raised:
    """An image prepared (prompt: one placeholder) and encoded alone (dp_size 1) in a fresh engine
    of `config`: its rows, or what the engine raised."""
    try:
        engine = factory(config, tokenizer)
        _, items = engine.prepare([tokenizer.media_pad_id], [img.copy()], [path])
        rows = engine.encode(list(items), 1)
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported with the image
        return Raised.of(exc)
    return plain_tensor(rows, "engine encode's result (one image alone)").clone()


def run_program(factory: EngineFactory, base: PreprocessConfig, steps: Sequence[Step], table: Sequence[Image.Image],
                tokenizer: Any | None = None, *, alone: bool = True) -> Trace:
    """Play `steps` on a fresh engine of `base`; with `alone`, also each prepared image alone in a
    fresh engine of the config in force when its request was prepared (one run per distinct
    image, path and config)."""
    tokenizer = tokenizer or Tokenizer()
    engine = factory(base, tokenizer)
    trace = Trace(engine_paths(engine))
    if any(s.kind == "configure" for s in steps) and not callable(getattr(engine, "configure", None)):
        raise CandidateError(f"engine {factory.spec!r} has no configure(config); the scenario reconfigures it")
    items: dict[int, list[Any]] = {}
    in_force = base
    solo: dict[tuple[int, str, PreprocessConfig], torch.Tensor | Raised] = {}
    for step in steps:
        if step.kind == "configure":
            assert step.config is not None
            engine.configure(step.config)
            in_force = step.config
        elif step.kind == "prepare":
            trace.prepared[step.request], items[step.request] = _prepare(engine, step, table)
            for i, (k, path) in enumerate(zip(step.images, step.paths)):
                if alone:
                    key = (k, path, in_force)  # configs compare by every field but the name
                    if key not in solo:
                        solo[key] = alone_rows(factory, tokenizer, in_force, table[k], path)
                    trace.alone[(step.request, i)] = solo[key]
        elif step.kind == "encode":
            trace.encoded.append(_encode(engine, items, step))
        else:
            raise ValueError(f"unknown program step {step.kind!r}")
    return trace


# ---------------------------------------------------------------------------------------------
# traces as plain data (what an engine's executor sends back: no object of the engine's)


def _raised_wire(r: Raised | None) -> tuple[str, str, str] | None:
    return None if r is None else (str(r.exc_type), str(r.message), str(r.traceback))


def _raised_back(w: Any) -> Raised | None:
    return None if w is None else Raised(*(str(x) for x in w))


def rows_to_wire(rows: torch.Tensor | Raised) -> tuple:
    """One image's rows (or its raise) as plain data."""
    if isinstance(rows, Raised):
        return ("raised", _raised_wire(rows))
    return ("rows", pack_tensor(rows))


def rows_from_wire(w: Any) -> torch.Tensor | Raised:
    """`rows_to_wire`'s data as a plain tensor (or a Raised)."""
    if not isinstance(w, tuple) or len(w) != 2 or w[0] not in ("raised", "rows"):
        raise CandidateError("the engine's executor sent rows in no known form")
    return _raised_back(w[1]) if w[0] == "raised" else unpack_tensor(w[1], "the engine's rows")  # type: ignore[return-value]


def _grid3(g: Any) -> tuple[int, int, int] | None:
    return None if g is None else tuple(int(v) for v in g)  # type: ignore[return-value]


def trace_to_wire(trace: Trace) -> dict[str, Any]:
    """A trace as builtins only (tensors as dtype, shape and bytes)."""
    return {
        "paths": [str(p) for p in trace.paths],
        "prepared": [(int(r), [int(t) for t in p.input_ids], [list(g) for g in p.grids],
                      [list(o) for o in p.offsets], _raised_wire(p.raised), str(p.ids_error))
                     for r, p in trace.prepared.items()],
        "encoded": [([list(m) for m in e.members], int(e.dp_size), int(e.total_rows), list(e.shape),
                     None if e.data is None else pack_tensor(e.data), [None if g is None else list(g)
                                                                        for g in e.item_grids],
                     _raised_wire(e.raised)) for e in trace.encoded],
        "alone": [(int(r), int(i), rows_to_wire(v)) for (r, i), v in trace.alone.items()],
    }


def trace_from_wire(w: Any) -> Trace:
    """`trace_to_wire`'s data as a Trace of plain tensors; CandidateError when it does not hold
    together."""
    try:
        trace = Trace(tuple(str(p) for p in w["paths"]))
        for r, ids, grids, offsets, raised, ids_error in w["prepared"]:
            trace.prepared[int(r)] = Prepared([int(t) for t in ids], [_grid3(g) for g in grids],  # type: ignore[misc]
                                              [tuple(int(v) for v in o) for o in offsets],  # type: ignore[misc]
                                              _raised_back(raised), str(ids_error))
        for members, dp, total, shape, data, item_grids, raised in w["encoded"]:
            trace.encoded.append(Encoded([tuple(int(v) for v in m) for m in members], int(dp),  # type: ignore[misc]
                                         int(total), tuple(int(n) for n in shape),
                                         None if data is None else unpack_tensor(data, "the engine's rows"),
                                         [_grid3(g) for g in item_grids], None, _raised_back(raised)))
        for r, i, rows in w["alone"]:
            trace.alone[(int(r), int(i))] = rows_from_wire(rows)
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001 - forged or truncated
        raise CandidateError(f"the engine's executor sent a trace that does not hold together: "
                             f"{type(exc).__name__}: {exc}") from None
    return trace


__all__ = ["DEFAULT_PATHS", "ENGINE_BUILTINS", "ENGINE_ENTRY_POINT_GROUP", "Encoded", "EngineFactory", "Prepared",
           "Raised", "Step", "Trace", "alone_rows", "engine_paths", "rows_from_wire", "rows_to_wire", "trace_from_wire", "trace_to_wire", "item_field", "item_grid", "item_offsets", "load_engine",
           "run_program"]
