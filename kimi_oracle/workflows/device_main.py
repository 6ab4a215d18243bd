"""`scripts/device_check.sh [--dry-run] RESULTS_DIR`: the device check's one entry point.

`python -m kimi_oracle.workflows.device_main RESULTS_DIR` runs `device_check` (exactness, the
benchmarks against the nominal peak and the measured copy floor, the targets) with the tile
sweep's short form (`tile_sweep.short_form`) and the workflows on CUDA (`device_workflows`:
fuzz with each oracle, SGLang on CUDA from the carried pruned tree, gate, bench, nightly) before
the build; `--dry-run RESULTS_DIR` runs
`device_dry_run` (everything but the CUDA launches).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kimi_oracle.workflows import device_check, tile_sweep
from kimi_oracle.workflows.device_dry_run import dry_run
from kimi_oracle.workflows.device_workflows import run_workflows


# The whole check's time on the device: the device tool's 600 s a call, less a margin for the
# machine's start and the results' transfer (workflows that no longer fit are skipped, said so).
RUN_SECONDS = 540.0


def main(argv: list[str]) -> int:
    """The check, or its dry run; the exit code."""
    if argv[:1] == ["--dry-run"]:
        if len(argv) != 2:
            print("usage: python -m kimi_oracle.workflows.device_main --dry-run RESULTS_DIR", file=sys.stderr)
            return 2
        return dry_run(Path(argv[1]))
    if len(argv) != 1:
        return device_check.main(argv)  # (its usage line, exit 2)
    out = Path(argv[0])
    deadline = time.monotonic() + RUN_SECONDS
    return device_check.main(argv, extra_steps=(tile_sweep.short_form, lambda res: run_workflows(
        res, out, deadline=deadline, write=lambda r: device_check.write(r, out))))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
