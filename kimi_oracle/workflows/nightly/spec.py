"""What a worker is given and what it reports: its spec file and its status file."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.core.files import write_json
from kimi_oracle.workflows.nightly.common import DEFAULT_LOG_LIMIT_MB, _read_json

# What a spec file must name; the other fields have their campaign defaults when absent.
REQUIRED_KEYS = ("engine", "worker", "budget_s", "seed", "out", "work")


@dataclass(frozen=True)
class WorkerSpec:
    """One worker's job: the runner writes it to `work/<worker>/spec.json`, the worker reads it.
    The JSON keys are the field names, as the dict spec of earlier versions had them, so that a
    running campaign's files stay readable. Paths are kept as the strings the file holds."""

    engine: str = "hypothesis"
    worker: int = 0
    budget_s: float = 0.0
    candidate: str = "reference"
    profile: str | None = None
    config_path: str | None = None
    tolerance: str = "exact"
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S
    memory_limit_mb: int | None = None
    vary_config: bool = True
    shard: tuple[int, int] = (1, 1)
    seed: int = 0
    out: str = ""
    corpus: str = ""
    db: str = ""
    work: str = ""
    max_findings: int = 100
    harnesses: tuple[str, ...] = ()
    max_examples: int | None = None
    shrink: bool = True
    log_limit_mb: float = DEFAULT_LOG_LIMIT_MB
    runner_pid: int | None = None
    oracle: str = "reference"  # `gpu`: hypothesis workers judge against the GPU pipeline (checked)
    oracle_check_share: float = 0.05

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "WorkerSpec":
        """The spec a JSON object holds (unknown keys ignored, absent ones at their defaults)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        for key, cast in (("budget_s", float), ("case_timeout_s", float), ("max_findings", int),
                          ("vary_config", bool), ("shrink", bool), ("shard", tuple), ("harnesses", tuple)):
            if key in values:
                values[key] = cast(values[key])
        values["log_limit_mb"] = float(values.get("log_limit_mb") or DEFAULT_LOG_LIMIT_MB)
        return cls(**values)

    @classmethod
    def coerce(cls, spec: "WorkerSpec | Mapping[str, Any]") -> "WorkerSpec":
        """`spec` itself, or the spec a dict (the form earlier callers passed) holds."""
        return spec if isinstance(spec, cls) else cls.from_dict(spec)

    @classmethod
    def read(cls, path: Path) -> "WorkerSpec":
        """The spec in `path`; KeyError naming the first required key it lacks (or cannot be read)."""
        data = _read_json(Path(path))
        for key in REQUIRED_KEYS:
            if key not in data:
                raise KeyError(key)
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written to the spec file."""
        data = dataclasses.asdict(self)
        data["shard"], data["harnesses"] = list(self.shard), list(self.harnesses)
        if self.oracle == "reference":  # (the keys of the files before `--oracle`, unchanged)
            del data["oracle"], data["oracle_check_share"]
        return data

    def write(self, path: Path) -> None:
        """Write the spec file (atomically)."""
        write_json(path, self.to_dict())


class _Status:
    """A worker's counters, written to its `status.json` (atomic, at most once a second unless forced)."""

    def __init__(self, path: Path, engine: str):
        self.path = path
        self.data: dict[str, Any] = {"engine": engine, "examples": 0, "findings": [], "error": None, "stopped": None}
        self._last = 0.0

    def write(self, force: bool = False) -> None:
        if force or time.monotonic() - self._last > 1.0:
            self._last = time.monotonic()
            write_json(self.path, self.data)


def _base_config(spec: WorkerSpec | Mapping[str, Any]) -> PreprocessConfig:
    spec = WorkerSpec.coerce(spec)
    return PreprocessConfig.resolve(spec.profile, spec.config_path)
