"""The nightly campaign runner: a time budget (or an example count) shared among fuzzing engines,
crash-proof workers, persistent corpus and example database, and a summary CI can parse and
people can read.

Process layout (each box survives the death of the one below it):

    kimi-oracle nightly (runner.py, no candidate code)          writes summary.json/.md, junit.xml
      └─ worker subprocess per engine job (own session)         `python -m kimi_oracle.workflows.nightly --worker`
           ├─ hypothesis: one fuzzing.fuzz(...) run             reference in-process
           └─ atheris: libFuzzer subprocess per harness         restarted after a harness-level crash
                └─ executor subprocess (sandbox.IsolatedCandidate): the candidate; its segfault,
                   abort, OOM kill or hang becomes a `crash` / `timeout` finding with its input.

A worker keeps its counters in `work/<worker>/status.json` (atomic), so a worker killed at the
budget's end or by Ctrl-C still contributes what it ran; the summary is always written.

One run per output folder: `OUT/.nightly.lock` (an flock held for the whole run, naming the
owner's pid) refuses a second run on the same `--out`; a lock left by a run that died is taken
over, and the summary says so. SIGINT and SIGTERM stop the workers (each also dies with the
runner, PR_SET_PDEATHSIG) and still write the summary (`stopped: interrupted`, exit 130/143).
Worker output (the candidate's prints included) goes through a pipe into `worker.log`, and
libFuzzer's into `libfuzzer-N.log`, each capped at `log_limit_mb` (the tail is kept). A full
disk ends the run with one line naming what was already written.

The package: `common` (options, result, shared names), `runner` (planning, the out lock, launching,
waiting, interrupts), `processes` (capped logs, pumps, process groups), `spec` (the worker spec
and status files), `worker` (the worker entry, hypothesis), `libfuzzer` (atheris), `summary`
(findings, summary.json/.md, junit.xml). Every name stays importable from here.
"""

from __future__ import annotations

from kimi_oracle.oracle.kinds import FINDING_KINDS  # noqa: F401  (re-exported, as before)
from kimi_oracle.workflows.nightly.common import (  # noqa: F401
    SUMMARY_SCHEMA,
    SUMMARY_SCHEMA_VERSION,
    ENGINES,
    LOCK_NAME,
    DEFAULT_LOG_LIMIT_MB,
    OutInUseError,
    DiskFullError,
    UnknownCheckError,
    atheris_available,
    CampaignOptions,
    CampaignResult,
    derive_seed,
    _count_db,
    _os_error,
    _read_json,
)
from kimi_oracle.workflows.nightly.processes import (  # noqa: F401
    CappedLog,
    pump,
    last_line,
    _Worker,
    _close_log,
    _signal_group,
    _reap_group,
)
from kimi_oracle.workflows.nightly.spec import (  # noqa: F401
    REQUIRED_KEYS,
    WorkerSpec,
    _Status,
    _base_config,
)
from kimi_oracle.workflows.nightly.summary import (  # noqa: F401
    finding_entry,
    collect_findings,
    _summarize,
    coverage_text,
    summary_markdown,
    write_summary,
    _write_junit,
)
from kimi_oracle.workflows.nightly.libfuzzer import (  # noqa: F401
    _COV,
    _UNITS,
    _INITED,
    _libfuzzer_stats,
    _feed_stats,
    _atheris_worker,
    _collect_harness,
    _harness_artifact_finding,
    write_harness_finding,
)
from kimi_oracle.workflows.nightly.worker import (  # noqa: F401
    DISK_FULL,
    _finding_folders,
    worker_main,
    _worker_error,
    _hypothesis_worker,
    main,
)
from kimi_oracle.workflows.nightly.runner import (  # noqa: F401
    plan_jobs,
    _repo_fuzz_dir,
    prepare_corpus,
    OutLock,
    run_campaign,
    _run_locked,
    _terminated,
    _not_written,
    _launch,
    _grace,
    _wait,
    _interrupt,
)
