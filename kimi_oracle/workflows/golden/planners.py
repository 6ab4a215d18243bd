"""Golden grids against a planner: every recorded grid of every profile through `oracle.planner`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.core.errors import InputError, PlanError
from kimi_oracle.workflows.golden.common import default_golden_dir, golden_path
from kimi_oracle.workflows.golden.entries import _error_text
from kimi_oracle.workflows.golden.fileformat import GoldenFile, GoldenFormatError, load
from kimi_oracle.workflows.golden.diffs import _display
from kimi_oracle.workflows.golden.checking import _selection


# ---------------------------------------------------------------------------------------------
# planners: every recorded grid of every profile


def planner_golden_report(planner: str | Any, golden_dir: Path | str | None = None,
                          profiles: Iterable[str] | None = None) -> Any:
    """Judge a planner (`oracle.planner`) on every entry of the grid goldens of `profiles`
    (default all), in this process: each recorded plan must come back field for field; an entry
    the checkpoint rejects (its `error`) is reported, not failed. A missing or unreadable grid
    file is an error line of the report."""
    from kimi_oracle.oracle.planner import PlannerReport, check_sizes, load_planner, plan_from_entry

    loaded = load_planner(planner) if isinstance(planner, str) else planner
    gdir = Path(golden_dir) if golden_dir is not None else default_golden_dir()
    report = PlannerReport(loaded.spec)
    for profile in _selection(("grids",), profiles):
        name = profile[1]
        config = PreprocessConfig.profile(name)
        path = golden_path(gdir, "grids", name)
        try:
            golden = load(path, "grids", name)
        except (OSError, UnicodeDecodeError, InputError, GoldenFormatError) as exc:
            report.errors.append(f"{_display(path)}: unreadable grid golden: {_error_text(exc)}")
            continue

        def entries(golden: GoldenFile = golden, config: PreprocessConfig = config) -> Iterable[tuple]:
            for e in golden.entries:
                expected = PlanError(str(e["error"])) if "error" in e else plan_from_entry(e)
                yield int(e["width"]), int(e["height"]), config, expected

        check_sizes(loaded, entries(), report, source=f"golden:{name}")
    return report


def check_planner(planner: str, *, golden_dir: Path | str | None = None, profiles: Iterable[str] | None = None,
                  fuzz_sizes: int = 0, config: PreprocessConfig | None = None, seed: int = 0,
                  vary_config: bool = True, case_timeout_s: float | None = DEFAULT_CASE_TIMEOUT_S,
                  budget_s: float | None = None) -> Any:
    """A planner against the grid goldens (and, with `fuzz_sizes`, on that many fuzzed sizes and
    configs around `config`, default k3), in a separate process: the gate's and `golden check
    --planner`'s entry point. Returns an `oracle.planner.PlannerReport` (`ok`, `lines()`,
    `to_dict()`); CandidateError (exit 2) when the planner cannot be loaded or returns no plan.
    Each planner call is bounded by `case_timeout_s`, the whole check by `budget_s` (None: none)."""
    import time

    from kimi_oracle.fuzzers.planner_fuzz import fuzz_planner, run_isolated

    deadline = time.monotonic() + budget_s if budget_s is not None else None

    def left() -> float | None:
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    report = run_isolated(planner_golden_report, planner, golden_dir, tuple(profiles) if profiles else None,
                          planner=planner, case_timeout_s=case_timeout_s, budget_s=left())
    if fuzz_sizes > 0 and not report.errors and report.stopped != "budget":
        report.merge(run_isolated(fuzz_planner, planner, config or PreprocessConfig.profile("k3"), planner=planner,
                                  case_timeout_s=case_timeout_s, budget_s=left(), sizes=fuzz_sizes, seed=seed,
                                  vary_config=vary_config))
    return report
