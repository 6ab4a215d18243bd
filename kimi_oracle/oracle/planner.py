"""Planner candidates: an engine's host-side planner `(width, height, config) -> plan`, checked
against the checkpoint's geometry on its own (pure arithmetic, no pixels).

A planner spec is written like a candidate spec (`oracle.candidates`): a built-in (`reference`,
or any built-in candidate whose module has a `plan` function), an entry point of the
`kimi_oracle.candidates` group, `package.module:function`, `path/to/file.py:function`, or a
module alone (`package.module`, `path/to/file.py`) with a `plan` function. A module (or an entry
point's object) with both `plan` and `preprocess` is an engine: as a planner its `plan` is used;
as a candidate its results are also checked against its own plan (`candidates.SelfCheckFailed`).

Accepted return shapes (`candidates.as_plan`): the project's `core.geometry.ResizePlan` (or any
object with its fields), the engine's dict `{num_tokens, new_width, new_height, pad_width,
pad_height}` with the grid derived as `(1, (new_height + pad_height) // p, (new_width +
pad_width) // p)`, or a dict with the `ResizePlan` field names.

Judging one size (`judge_size`): when the checkpoint plans it, the planner must return the same
plan: the first differing field in the order new size, padding, grid, token count is a
`planner_mismatch` finding naming that field and the size; a raise is a `planner_crash` finding.
When the checkpoint rejects the size (its side assert), the planner's answer is reported, never
failed: a raise agrees, a plan is counted and a few examples kept (`rejected_planned`). A
mismatch that a config field the planner ignores explains says so by name (`ignored_field`: "the
planner ignores fixed_output_tokens").
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from kimi_oracle.adapters.engines import engine_planner, is_engine_spec
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import BackendError, CandidateError, PlanError
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.oracle.candidates import (
    BUILTINS,
    PLAN_FIELDS,
    PlanShape,
    as_plan,
    first_doc_line,
    named_function,
    resolve,
    stripped_spec,
)

PLANNER_MISMATCH = "planner_mismatch"
PLANNER_CRASH = "planner_crash"
PLANNER_KINDS = (PLANNER_MISMATCH, PLANNER_CRASH)
# Built-in planners beyond the built-in candidates' own `plan` functions.
PLANNER_BUILTINS = {
    "reference": ("kimi_oracle.core.geometry", "plan", "the checkpoint's navit_resize_config (side assert included)"),
}
# Examples of sizes the checkpoint rejects but the planner planned, kept per report.
MAX_REJECTED_EXAMPLES = 5


@dataclass
class Planner:
    """A loaded planner: `planner(w, h, config)` gives its answer as a `PlanShape`."""

    spec: str
    func: Callable[[int, int, PreprocessConfig], Any]
    description: str = ""
    preprocess: Callable[..., Any] | None = None  # set when the spec names an engine with both

    def raw(self, width: int, height: int, config: PreprocessConfig) -> Any:
        """The planner's own return value (exceptions propagate)."""
        return self.func(width, height, config)

    def __call__(self, width: int, height: int, config: PreprocessConfig) -> PlanShape:
        watch = CALL_WATCH
        if watch is None:
            return as_plan(self.func(width, height, config), config, self.spec, (width, height))
        watch.began(width, height)
        try:
            out = self.func(width, height, config)
        finally:
            watch.ended()
        return as_plan(out, config, self.spec, (width, height))


class CallWatch:
    """What a watching process sees of the planner's calls (`fuzzers.planner_fuzz.run_isolated`
    sets one in the planner's process): each call's start and end, the size it is on, and a
    deadline after which `check_sizes` stops (its report so far is the answer)."""

    def began(self, width: int, height: int) -> None:  # pragma: no cover - interface
        pass

    def ended(self) -> None:  # pragma: no cover - interface
        pass

    def should_stop(self) -> bool:
        return False


# Set in a planner's own process only (never in the tool's): see CallWatch.
CALL_WATCH: CallWatch | None = None


def load_planner(spec: str) -> Planner:
    """Resolve a planner spec, or raise CandidateError."""
    spec = stripped_spec(spec, "empty planner spec; give reference, a built-in engine, an entry point, "
                         "package.module:function, path/to/file.py:function or a module with plan()")
    if spec in PLANNER_BUILTINS or spec in BUILTINS:
        module_name, attr, description = PLANNER_BUILTINS.get(spec) or (BUILTINS[spec][0], "plan", BUILTINS[spec][2])
        try:
            module = importlib.import_module(module_name)
        except (ImportError, BackendError) as exc:
            raise CandidateError(f"built-in planner {spec!r} is not available here: {type(exc).__name__}: {exc}") from None
        func = getattr(module, attr, None)
        if not callable(func):
            raise CandidateError(f"built-in candidate {spec!r} has no planner ({module_name} defines no {attr}())")
        return Planner(spec, func, description)
    if is_engine_spec(spec):  # a real engine's own planner (`sglang`, `transformers@5.23.0`: kimi_oracle.adapters)
        func, description = engine_planner(spec)
        return Planner(spec, func, description)
    obj = resolve(spec, "planner")
    if not inspect.isroutine(obj) and callable(getattr(obj, "plan", None)):
        pre = getattr(obj, "preprocess", None)
        return Planner(spec, obj.plan, first_doc_line(obj.plan) or first_doc_line(obj), pre if callable(pre) else None)
    func = named_function(obj, "planner", spec, "plan", describe=lambda o: type(o).__name__)
    return Planner(spec, func, first_doc_line(obj))


# ---------------------------------------------------------------------------------------------
# comparison


def config_text(config: PreprocessConfig) -> str:
    """The planner-relevant part of a config, for messages."""
    text = (f"patch {config.patch_size}, merge {config.merge_kernel_size}, limit {config.in_patch_limit}, "
            f"side {config.patch_limit_on_one_side}")
    if config.fixed_output_tokens is not None:
        text += f", fixed tokens {config.fixed_output_tokens}"
    return text


def plan_dict(p: ResizePlan) -> dict[str, Any]:
    """A plan's fields, JSON-ready."""
    return {"new_w": p.new_w, "new_h": p.new_h, "pad_w": p.pad_w, "pad_h": p.pad_h,
            "grid_thw": list(p.grid_thw), "num_tokens": p.num_tokens}


def plan_from_entry(entry: Mapping[str, Any]) -> ResizePlan:
    """A `ResizePlan` from a grid golden entry (the fields `golden.grid_entry` records)."""
    return ResizePlan(int(entry["new_w"]), int(entry["new_h"]), int(entry["pad_w"]), int(entry["pad_h"]),
                      tuple(int(v) for v in entry["grid_thw"]), int(entry["num_tokens"]))  # type: ignore[arg-type]


def first_difference(expected: ResizePlan, actual: ResizePlan) -> str | None:
    """The first field (in `PLAN_FIELDS` order) where two plans differ, or None."""
    for name in PLAN_FIELDS:
        a, e = getattr(actual, name), getattr(expected, name)
        if (tuple(a) if name == "grid_thw" else a) != (tuple(e) if name == "grid_thw" else e):
            return name
    return None


@dataclass
class PlannerFinding:
    """One kind of planner failure: its first (and its smallest) example, and how often it hit."""

    kind: str  # planner_mismatch | planner_crash
    key: str  # kind[field] or kind(ExceptionType)
    message: str
    size: tuple[int, int]
    config: PreprocessConfig
    source: str  # "golden:k3", "fuzz", ...
    field: str | None = None  # the field as the planner's shape names it
    expected: Any = None
    actual: Any = None
    expected_plan: dict[str, Any] | None = None
    actual_plan: dict[str, Any] | None = None
    exception: str | None = None
    traceback: str | None = None
    hits: int = 1
    smallest: dict[str, Any] | None = None  # the smallest-area example, when not the first
    cause: str | None = None  # a config field the planner ignores, when that explains the plan (`ignored_field`)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (`check` is the kind)."""
        return {"check": self.kind, "key": self.key, "message": self.message, "size": list(self.size),
                "config": self.config.to_hf_json(), "config_text": config_text(self.config), "source": self.source,
                "field": self.field, "expected": self.expected, "actual": self.actual,
                "expected_plan": self.expected_plan, "actual_plan": self.actual_plan,
                "exception": self.exception, "traceback": self.traceback, "hits": self.hits,
                "smallest": self.smallest, "cause": self.cause}


@dataclass
class PlannerReport:
    """What checking a planner found: counts, findings by key, the rejected sizes it planned."""

    planner: str
    checked: int = 0  # sizes judged, rejected ones included
    passed: int = 0
    rejected: int = 0  # sizes the checkpoint rejects
    rejected_planned: int = 0  # ... and the planner planned anyway (reported, not failed)
    rejected_examples: list[dict[str, Any]] = field(default_factory=list)
    findings: dict[str, PlannerFinding] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)  # sizes judged per source
    shapes: dict[str, int] = field(default_factory=dict)  # return shapes seen (plan, engine, dict)
    elapsed_s: float = 0.0
    errors: list[str] = field(default_factory=list)  # the planner could not be run (harness problems)
    stopped: str = ""  # "budget": the sizes judged before the budget's end (the rest were not)

    @property
    def ok(self) -> bool:
        """True when no finding and no error."""
        return not self.findings and not self.errors

    def counts(self) -> dict[str, int]:
        """Hits per finding kind."""
        out = {k: 0 for k in PLANNER_KINDS}
        for f in self.findings.values():
            out[f.kind] += f.hits
        return out

    def merge(self, other: "PlannerReport") -> "PlannerReport":
        """Add another report's counts and findings (kept: the earlier first example)."""
        self.checked += other.checked
        self.passed += other.passed
        self.rejected += other.rejected
        self.rejected_planned += other.rejected_planned
        room = MAX_REJECTED_EXAMPLES - len(self.rejected_examples)
        self.rejected_examples += other.rejected_examples[: max(room, 0)]
        for key, f in other.findings.items():
            mine = self.findings.get(key)
            if mine is None:
                self.findings[key] = f
            else:
                mine.hits += f.hits
        for name, n in other.sources.items():
            self.sources[name] = self.sources.get(name, 0) + n
        for name, n in other.shapes.items():
            self.shapes[name] = self.shapes.get(name, 0) + n
        self.elapsed_s += other.elapsed_s
        self.errors += other.errors
        self.stopped = self.stopped or other.stopped
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the `planner` part of a command's `--json` document)."""
        return {"planner": self.planner, "ok": self.ok, "checked": self.checked, "passed": self.passed,
                "rejected": self.rejected, "rejected_planned": self.rejected_planned,
                "rejected_examples": list(self.rejected_examples), "counts": self.counts(),
                "findings": [f.to_dict() for f in self.findings.values()], "sources": dict(self.sources),
                "shapes": dict(self.shapes), "elapsed_s": round(self.elapsed_s, 3), "errors": list(self.errors),
                "stopped": self.stopped}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PlannerReport":
        """Rebuild a report sent back by an isolated run (`to_dict`'s form)."""
        report = cls(str(data["planner"]), checked=int(data["checked"]), passed=int(data["passed"]),
                     rejected=int(data["rejected"]), rejected_planned=int(data["rejected_planned"]),
                     rejected_examples=list(data.get("rejected_examples") or []),
                     sources=dict(data.get("sources") or {}), shapes=dict(data.get("shapes") or {}),
                     elapsed_s=float(data.get("elapsed_s") or 0.0), errors=list(data.get("errors") or []),
                     stopped=str(data.get("stopped") or ""))
        for f in data.get("findings") or []:
            report.findings[f["key"]] = PlannerFinding(
                f["check"], f["key"], f["message"], tuple(f["size"]),  # type: ignore[arg-type]
                PreprocessConfig.from_hf_json(f["config"]), f["source"], f.get("field"), f.get("expected"),
                f.get("actual"), f.get("expected_plan"), f.get("actual_plan"), f.get("exception"),
                f.get("traceback"), int(f.get("hits") or 1), f.get("smallest"), f.get("cause"))
        return report

    def lines(self) -> list[str]:
        """A readable summary: one line per finding (size and field first), then the counts."""
        out = []
        for f in self.findings.values():
            more = f" ({f.hits} sizes)" if f.hits > 1 else ""
            out.append(f"FAIL {f.key}{more}, first in {f.source}: {f.message}")
            if f.smallest:
                out.append(f"     smallest: {f.smallest['message']}")
        if self.rejected_planned:
            ex = self.rejected_examples[0] if self.rejected_examples else None
            out.append(f"note: the checkpoint rejects {self.rejected} size(s); the planner planned "
                       f"{self.rejected_planned} of them (reported, not a failure)"
                       + (f", e.g. {ex['size'][0]}x{ex['size'][1]} ({ex['config_text']})" if ex else ""))
        for err in self.errors:
            out.append(f"error: {err}")
        if self.stopped == "budget":
            out.append("note: the budget ended the planner check: the sizes after these were not judged")
        verdict = "ok" if self.ok else "FAIL"
        out.append(f"planner {self.planner}: {verdict}: {self.checked} sizes ({self.passed} agree, "
                   f"{self.rejected} rejected by the checkpoint), {len(self.findings)} finding(s), "
                   f"{self.elapsed_s:.1f} s")
        return out


def _record(report: PlannerReport, finding: PlannerFinding) -> None:
    mine = report.findings.get(finding.key)
    if mine is None:
        report.findings[finding.key] = finding
        return
    mine.hits += 1
    area = finding.size[0] * finding.size[1]
    best = mine.smallest["size"] if mine.smallest else list(mine.size)
    if area < best[0] * best[1]:
        mine.smallest = {"size": list(finding.size), "config": finding.config.to_hf_json(),
                         "message": finding.message, "source": finding.source}


def judge_size(planner: Planner, report: PlannerReport, width: int, height: int, config: PreprocessConfig,
               expected: ResizePlan | PlanError | None = None, source: str = "fuzz") -> bool:
    """Judge one size; record the outcome in `report`; True when it is not a finding.

    `expected` is the checkpoint's plan (or its PlanError); computed with `core.geometry.plan`
    when None. CandidateError (a return value that is no plan) propagates.
    """
    report.checked += 1
    report.sources[source] = report.sources.get(source, 0) + 1
    if expected is None:
        try:
            expected = plan(width, height, config)
        except PlanError as exc:
            expected = exc
    try:
        got = planner(width, height, config)
    except (CandidateError, BackendError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - the planner's own failure on this size
        if isinstance(expected, PlanError):
            report.rejected += 1  # a raise agrees with the checkpoint
            return True
        kind = type(exc).__name__
        _record(report, PlannerFinding(
            PLANNER_CRASH, f"{PLANNER_CRASH}({kind})",
            f"{width}x{height} ({config_text(config)}): the planner raised {kind}: {exc}"[:500],
            (width, height), config, source, exception=f"{kind}: {exc}"[:2000],
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]))
        return False
    report.shapes[got.shape] = report.shapes.get(got.shape, 0) + 1
    if isinstance(expected, PlanError):
        report.rejected += 1
        report.rejected_planned += 1
        if len(report.rejected_examples) < MAX_REJECTED_EXAMPLES:
            report.rejected_examples.append({"size": [width, height], "config_text": config_text(config),
                                             "reason": str(expected), "planner_plan": plan_dict(got.plan),
                                             "source": source})
        return True
    name = first_difference(expected, got.plan) if got.plan != expected else None
    if name is None:
        report.passed += 1
        return True
    shown = got.names.get(name, name)
    a, e = getattr(got.plan, name), getattr(expected, name)
    a, e = (list(a), list(e)) if name == "grid_thw" else (a, e)
    cause = ignored_field(width, height, config, got.plan)
    _record(report, PlannerFinding(
        PLANNER_MISMATCH, f"{PLANNER_MISMATCH}[{name}]",
        f"{width}x{height} ({config_text(config)}): {shown} {a}, expected {e}" + (f"; {cause}" if cause else ""),
        (width, height), config, source, field=shown, expected=e, actual=a,
        expected_plan=plan_dict(expected), actual_plan=plan_dict(got.plan), cause=cause))
    return False


def ignored_field(width: int, height: int, config: PreprocessConfig, actual: ResizePlan) -> str | None:
    """Why a planner's differing plan differs, when a config field it ignores explains it: with
    `fixed_output_tokens` set, a plan that is the checkpoint's without it (the token count from
    the grid) is a planner that ignores `fixed_output_tokens` (transformers' `navit_resize` takes
    no such parameter). None otherwise."""
    if config.fixed_output_tokens is None:
        return None
    try:
        without = plan(width, height, dataclasses.replace(config, fixed_output_tokens=None), side_assert=False)
    except PlanError:
        return None
    if first_difference(without, actual) is not None:
        return None
    n = without.num_tokens
    return (f"the planner ignores fixed_output_tokens ({config.fixed_output_tokens}): its plan is the "
            f"checkpoint's without it ({n} token{'' if n == 1 else 's'} from the grid)")


def check_sizes(planner: Planner, cases: Iterable[tuple[int, int, PreprocessConfig, Any]],
                report: PlannerReport | None = None, *, source: str = "fuzz",
                should_stop: Callable[[], bool] | None = None) -> PlannerReport:
    """Judge every `(width, height, config, expected)` of `cases` (`expected` None: the checkpoint's
    plan now). `should_stop` is asked every 1024 sizes."""
    report = report or PlannerReport(planner.spec)
    started = time.perf_counter()
    watch = CALL_WATCH
    for i, (w, h, config, expected) in enumerate(cases):
        if should_stop is not None and i % 1024 == 0 and should_stop():
            break
        if watch is not None and watch.should_stop():
            report.stopped = "budget"
            break
        judge_size(planner, report, w, h, config, expected, source)
    report.elapsed_s += time.perf_counter() - started
    return report


__all__ = [
    "MAX_REJECTED_EXAMPLES",
    "PLANNER_BUILTINS",
    "PLANNER_CRASH",
    "PLANNER_KINDS",
    "PLANNER_MISMATCH",
    "Planner",
    "PlannerFinding",
    "PlannerReport",
    "check_sizes",
    "config_text",
    "first_difference",
    "ignored_field",
    "judge_size",
    "load_planner",
    "plan_dict",
    "plan_from_entry",
]
