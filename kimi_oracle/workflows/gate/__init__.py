"""The upgrade gate: one pass/fail verdict on a new preprocessing kernel (the package's public names).

Stages, in order (`STAGES`): `goldens`, the pixel goldens of every profile run with NEW;
`planner`, with `--planner SPEC`, the planner's plans against every recorded grid and on fuzzed
sizes; `fuzz`, differential fuzzing of NEW against the reference (with the same configuration
variation as `fuzz`); `corpus`, with `--corpus DIR`, real image files; `invariance`, checks on
generated batches; and `performance`, with a baseline, an interleaved A/B timing of NEW against
OLD.

NEW and OLD never run in the gate's process: each runs in its own executor process
(`fuzzers.sandbox.IsolatedCandidate`), reused between calls, every call bounded by the case
timeout (and the address space by the memory limit). A crash, exit, signal, hang or memory
exhaustion of NEW is a `fail` with findings; of OLD (the baseline, used by the timing only) an
`error`. The timing stage times each call inside the candidate's own executor
(`IsolatedCandidate.time_call`: the function's own time, without sending images or results), so
NEW and OLD are timed under the same conditions and a crash there is a finding, never a dead gate.

With a baseline the correctness verdict is relative (docs/gate.md): NEW and OLD are judged
against the reference on the same inputs (the pixel goldens of every profile, the fuzz stage's
cases, the invariance batches and, with `--corpus`, real files), and compared root cause by root
cause and mode class by mode class (`workflows.known`): a root cause NEW has and OLD has not, or
one that grew beyond `--margin`, fails; the same or less passes. Without a baseline the verdict
is absolute (any divergence fails) unless `--known FILE` lists the accepted divergences.

Ctrl-C and SIGTERM end the stage that runs with `error` and skip the rest; the report is still
written, says `stopped: interrupted`, and its verdict is `error`, never `pass`.

One module per stage (`goldens`, `planner`, `fuzz`, `corpus`, `invariance`, `timing`), each
`run(ctx) -> Stage` over the shared `context.GateContext` and naming its own place (`NAME`,
`ORDER`, `COMPARED`: `run.stage_modules` finds them); `budget` shares the budget and the
overhead allowance; `report` renders; `run.Gate` orders the stages and compares the rows.
"""

from kimi_oracle.workflows.gate.budget import (FUZZ_OVERHEAD_PAIR, FUZZ_PAIR_SHARE, INVARIANCE_SHARE,
                                               LATER_OVERHEAD_SHARE, OVERHEAD_AIM, OVERHEAD_MIN_EXAMPLES,
                                               PERF_SHARE, WRITE_ESTIMATE_S, Budget)
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.fuzz import DIFFERING_PER_GROUP, MAX_DIFFERING
from kimi_oracle.workflows.gate.goldens import GOLDEN_RERUN_PER_CLASS, MAX_DIFF_IMAGES
from kimi_oracle.workflows.gate.options import GateOptions, Stage
from kimi_oracle.workflows.gate.report import SCHEMA, SCHEMA_VERSION, render_markdown
from kimi_oracle.workflows.gate.run import STAGES, Gate
from kimi_oracle.workflows.gate.timing import PERF_INPUTS

__all__ = [
    "DIFFERING_PER_GROUP", "FUZZ_OVERHEAD_PAIR", "FUZZ_PAIR_SHARE", "GOLDEN_RERUN_PER_CLASS", "INVARIANCE_SHARE",
    "LATER_OVERHEAD_SHARE", "MAX_DIFFERING", "MAX_DIFF_IMAGES", "OVERHEAD_AIM", "OVERHEAD_MIN_EXAMPLES", "PERF_INPUTS",
    "PERF_SHARE", "SCHEMA", "SCHEMA_VERSION", "STAGES", "WRITE_ESTIMATE_S", "Budget", "Gate", "GateContext",
    "GateOptions", "Stage", "render_markdown",
]
