"""`fuzz --engine`: request scenarios played on an engine, judged, shrunk and saved.

Scenario i of a run seeded `seed` is `draw_scenario(RandomSource(derive(seed, i)), ...)`: it
depends only on (seed, i, the options, the base config). Each is played on the engine (in its
executor, `fuzzers.engine_sandbox`) and judged by `oracle.request_checks.judge`; a
`rows_invariance` finding is explained when another item's mean/std/background reproduces it.
The first scenario of each new check is shrunk (`Scenario.smaller`: fewer requests, images,
ranks, chunks, configs) while the same check fails, and saved as a folder that `repro` replays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from kimi_oracle.core import interrupts
from kimi_oracle.core.defaults import fresh_seed
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.tokenizer import Tokenizer
from kimi_oracle.inputs.draw import RandomSource, derive
from kimi_oracle.inputs.scenarios import Scenario, ScenarioOptions, draw_scenario
from kimi_oracle.oracle.checks import PIXEL_MISMATCH
from kimi_oracle.oracle.request_checks import ROWS_INVARIANCE, RequestFinding, explain_rows, judge
from kimi_oracle.pipelines.request_contract import framing_for
from kimi_oracle.fuzzers.engine_sandbox import EngineCrash
from kimi_oracle.results.scenario_report import ScenarioFinding, write_scenario_finding

DEFAULT_SCENARIOS = 100


@dataclass(frozen=True)
class ScenarioFuzzOptions:
    """A scenario run's options."""

    examples: int = DEFAULT_SCENARIOS
    seed: int | None = None
    mixed_configs: bool = False
    pixels: bool = False
    tolerance: str = "exact"
    shrink: bool = True
    stop_early: bool = False  # end at the first finding (once shrunk)
    stop_on: tuple[str, ...] = ()  # end once a finding of one of these checks is saved
    max_shrink_runs: int = 300
    max_requests: int = 8
    max_images: int = 6
    max_side: int = 40
    budget_s: float | None = None  # wall-clock bound of the whole run, shrinking included (None: none)


@dataclass
class ScenarioRun:
    """What a run did."""

    engine: str
    seed: int
    examples: int = 0
    runs: int = 0
    findings: list[ScenarioFinding] = field(default_factory=list)
    first_found: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    stopped: str = "examples"

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"engine": self.engine, "seed": self.seed, "examples": self.examples, "runs": self.runs,
                "elapsed_s": round(self.elapsed_s, 3), "stopped": self.stopped, "first_found": self.first_found,
                "findings": [{"check": f.check, "message": f.message, "path": str(f.path) if f.path else None,
                              "requests": len(f.scenario.requests), "scenario": f.scenario.to_dict(),
                              "findings": f.findings} for f in self.findings]}


def evaluate(runner: Any, scenario: Scenario, options: ScenarioFuzzOptions, table: Sequence[Any] | None = None,
             *, explain: bool = True) -> list[RequestFinding]:
    """Play a scenario on the engine (on `table`, its images, when given) and judge it (first
    check first); `explain`: a rows-invariance finding gets its rows explained (each image run
    alone: the shrink's steps leave that to the scenario it keeps)."""
    tok = Tokenizer()
    table = list(table) if table is not None else scenario.make_images()
    steps = scenario.steps(tok)
    base = scenario.configs[0]
    try:
        trace = runner.run(base, steps, table)
    except EngineCrash as exc:
        return [RequestFinding(exc.check, f"{exc.exc_type}: {exc.message}")]
    found = judge(steps, trace, base, table, tok, scenario.framing, pixels=options.pixels,
                  tolerance=options.tolerance)
    if explain and found and found[0].check == ROWS_INVARIANCE:
        explain_rows(found[0], steps, trace, base, table, runner.alone)
    return found


def shrink(runner: Any, scenario: Scenario, found: list[RequestFinding], options: ScenarioFuzzOptions,
           budget: list[int], deadline: float | None = None) -> tuple[Scenario, list[RequestFinding]]:
    """The smallest scenario (greedy, one step at a time) whose first check is still that of
    `found`, the findings `scenario` already gave (at most `budget[0]` runs, until `deadline`)."""
    best, check = scenario, found[0].check
    improved = True
    while improved and budget[0] > 0:
        improved = False
        for smaller in best.smaller():
            if deadline is not None and time.monotonic() >= deadline:
                budget[0] = 0  # (the run's budget is spent: the finding is kept as it is now)
            if budget[0] <= 0:
                break
            budget[0] -= 1
            got = evaluate(runner, smaller, options, explain=False)
            if got and got[0].check == check:
                best, found, improved = smaller, got, True
                break
    if best is not scenario and check == ROWS_INVARIANCE and budget[0] > 0:
        budget[0] -= 1  # once more, explained (an engine that now answers otherwise keeps the unexplained)
        again = evaluate(runner, best, options)
        if again and again[0].check == check:
            found = again
    return best, found


def diagnose(finding: RequestFinding) -> None:
    """A `pixel_mismatch` against the reference diagnosed as the image fuzzer's are
    (`oracle.diagnosis.finding_diagnosis`): its root causes in the details and the message."""
    from kimi_oracle.oracle.diagnosis import finding_diagnosis

    ev = finding.evidence
    if not ev:
        return
    found = finding_diagnosis(PIXEL_MISMATCH, finding.details.get("stats"), ev["images"], ev["config"],
                              ev["expected"], ev["actual"])
    finding.details["diagnosis"] = {k: v for k, v in found.items() if k != "attribution"}
    if found.get("root_causes"):
        finding.message += f"; root cause: {', '.join(found['root_causes'])}"


def options_for(runner: Any, base: PreprocessConfig, options: ScenarioFuzzOptions) -> ScenarioOptions:
    """The draw's options for this engine (its paths, whether it can be reconfigured)."""
    return ScenarioOptions(paths=tuple(runner.paths), configurable=bool(runner.configurable),
                           mixed_configs=options.mixed_configs, max_requests=options.max_requests,
                           max_images=options.max_images, max_side=options.max_side)


def fuzz_engine(runner: Any, base: PreprocessConfig, options: ScenarioFuzzOptions, *, out_dir: Path | None = None,
                on_example: Callable[[ScenarioRun], None] | None = None) -> ScenarioRun:
    """Run `options.examples` scenarios; each new check's first scenario shrunk and saved."""
    seed = options.seed if options.seed is not None else fresh_seed()
    run = ScenarioRun(runner.spec, seed)
    draw_options = options_for(runner, base, options)
    framing = framing_for(base)
    started = time.monotonic()
    deadline = None if options.budget_s is None else started + max(float(options.budget_s), 0.0)
    try:
        _search(runner, base, options, draw_options, framing, run, out_dir, on_example, deadline)
    except KeyboardInterrupt:  # SIGINT/SIGTERM: what was found is kept, the summary says so
        run.stopped = "interrupted"
    run.elapsed_s = time.monotonic() - started
    return run


def _search(runner: Any, base: PreprocessConfig, options: ScenarioFuzzOptions, draw_options: ScenarioOptions,
            framing: str, run: ScenarioRun, out_dir: Path | None,
            on_example: Callable[[ScenarioRun], None] | None, deadline: float | None = None) -> None:
    seed = run.seed
    for i in range(options.examples):
        if interrupts.requested():
            run.stopped = "interrupted"
            break
        if deadline is not None and time.monotonic() >= deadline:
            run.stopped = "budget"
            break
        scenario = draw_scenario(RandomSource(derive(seed, i)), base, draw_options, framing)
        found = evaluate(runner, scenario, options)
        run.examples += 1
        run.runs += 1
        if found and found[0].check not in run.first_found:
            check = found[0].check
            run.first_found[check] = i
            original = len(scenario.requests)
            if options.shrink:
                budget = [options.max_shrink_runs]
                scenario, found = shrink(runner, scenario, found, options, budget, deadline)
                run.runs += options.max_shrink_runs - budget[0]
            if check == PIXEL_MISMATCH:
                diagnose(found[0])
            finding = ScenarioFinding(check, found[0].message, scenario, [f.to_dict() for f in found], runner.spec,
                                      seed, i, original,
                                      extra={"pixels": options.pixels, "tolerance": options.tolerance,
                                             "mixed_configs": options.mixed_configs})
            if out_dir is not None:
                write_scenario_finding(out_dir, finding, scenario.make_images())
            run.findings.append(finding)
        if on_example is not None:
            on_example(run)
        if (options.stop_early and run.findings) or any(f.check in options.stop_on for f in run.findings):
            run.stopped = "first finding"
            break


__all__ = ["DEFAULT_SCENARIOS", "ScenarioFuzzOptions", "ScenarioRun", "evaluate", "fuzz_engine", "options_for",
           "shrink"]
