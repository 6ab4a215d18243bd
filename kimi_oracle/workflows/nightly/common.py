"""What the nightly modules share: names, errors, the campaign options and result, small helpers."""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.core.errors import KimiOracleError
from kimi_oracle.oracle.kinds import FINDING_KINDS


SUMMARY_SCHEMA = "kimi-oracle.nightly-summary"
SUMMARY_SCHEMA_VERSION = 1
ENGINES = ("hypothesis", "atheris")
LOCK_NAME = ".nightly.lock"
DEFAULT_LOG_LIMIT_MB = 8


class OutInUseError(KimiOracleError):
    """`--out` is in use by another nightly run (its lock is held)."""


class DiskFullError(KimiOracleError):
    """A write failed (a full disk, most often): the run ends with one line naming what was
    already written."""


class UnknownCheckError(KimiOracleError):
    """A finding folder names a check the oracle does not define (`checks.FINDING_KINDS`): the
    campaign reports it as a harness error instead of guessing a kind for it."""


def atheris_available() -> bool:
    """True when atheris can be imported (the `fuzz` extra)."""
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class CampaignOptions:
    """Everything `kimi-oracle nightly` takes."""

    out: Path
    budget_s: float = 1800.0
    candidate: str = "reference"
    profile: str | None = None  # None with no config_path: the default profile
    config_path: Path | None = None
    corpus: Path | None = None
    db: Path | None = None
    engines: tuple[str, ...] = ENGINES
    engines_explicit: bool = False
    shard: tuple[int, int] = (1, 1)
    jobs: int = 1
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S
    tolerance: str = "exact"
    seed: int | None = None
    vary_config: bool = True
    # `--oracle gpu`: the hypothesis workers take their expected results from the GPU pipeline
    # (`oracle.gpu_oracle`, the reference rechecking `oracle_check_share` and every failure);
    # atheris' harnesses keep the reference.
    oracle: str = "reference"
    oracle_check_share: float = 0.05
    max_findings: int = 100
    memory_limit_mb: int | None = None
    harnesses: tuple[str, ...] = ("structured", "decoder")
    # Stop each worker after this many examples (atheris: per harness, libFuzzer's -runs); the
    # budget then only bounds a run that cannot get there.
    max_examples: int | None = None
    shrink: bool = True  # hypothesis shrinks its findings; atheris minimizes crash inputs
    log_limit_mb: float = DEFAULT_LOG_LIMIT_MB  # each worker's log (and libFuzzer's) keeps its last MiB
    # --planner SPEC: validated before any worker starts, fuzzed after them (workflows.nightly_planner)
    planner: str | None = None
    planner_sizes: int = 200_000
    # --engine SPEC: its request layer fuzzed after the workers, within the budget's engine share
    # (workflows.nightly_engine), in the summary, JUnit and exit code
    engine: str | None = None
    engine_scenarios: int = 2000
    # --media video|both: the candidate fuzzed on video_examples batches of K2.5 chunks after the
    # workers (workflows.nightly_video), in the summary (`video`), JUnit and exit code
    media: str = "image"
    video_examples: int = 300

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.corpus = Path(self.corpus) if self.corpus else self.out / "corpus"
        self.db = Path(self.db) if self.db else self.out / "hypothesis-db"
        unknown = [e for e in self.engines if e not in ENGINES]
        if unknown or not self.engines:
            raise ValueError(f"unknown engine {unknown[0] if unknown else '(none)'!r}; expected {', '.join(ENGINES)}")
        if self.jobs < 1:
            raise ValueError("--jobs must be at least 1")
        if self.max_examples is not None and self.max_examples < 1:
            raise ValueError("--max-examples must be at least 1")
        if not self.log_limit_mb > 0:
            raise ValueError("--log-limit must be positive")


@dataclass
class CampaignResult:
    """The summary written to disk, and the exit code."""

    summary: dict[str, Any]
    exit_code: int
    out: Path

    @property
    def findings(self) -> list[dict[str, Any]]:
        """The summary's findings."""
        return self.summary["findings"]


def derive_seed(base: int, shard: tuple[int, int], worker: int, iteration: int = 0) -> int:
    """Distinct, reproducible seeds per shard, worker and iteration."""
    return (int(base) * 1_000_003 + shard[0] * 7_919 + worker * 104_729 + iteration * 15_485_863) % (2**32)


def _count_db(db: Path) -> int:
    if not db.is_dir():
        return 0
    return sum(1 for p in db.rglob("*") if p.is_file() and not p.name.startswith("."))


def _os_error(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    what = f" writing {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{f' ({name})' if name else ''}{what}"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
