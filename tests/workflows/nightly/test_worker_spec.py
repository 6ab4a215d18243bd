"""The worker spec file: its JSON keys are those a running campaign's workers read."""

from __future__ import annotations

import json

import pytest

from kimi_oracle.workflows.nightly import WorkerSpec

# The spec file as the runner wrote it before the spec was typed (22 keys, hand-written here).
ON_DISK = {
    "engine": "atheris", "worker": 3, "budget_s": 120.0, "candidate": "my.mod:run", "profile": "k3-small",
    "config_path": None, "tolerance": "exact", "case_timeout_s": 7.5, "memory_limit_mb": 2048,
    "vary_config": False, "shard": [2, 4], "seed": 12345, "out": "/o", "corpus": "/o/corpus",
    "db": "/o/hypothesis-db", "work": "/o/work/w3-atheris", "max_findings": 9,
    "harnesses": ["structured", "decoder"], "max_examples": None, "shrink": False, "log_limit_mb": 0.5,
    "runner_pid": 4242,
}


def test_a_spec_file_of_the_dict_era_reads_and_writes_back_the_same(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(ON_DISK))
    spec = WorkerSpec.read(path)
    assert (spec.engine, spec.worker, spec.shard, spec.harnesses) == ("atheris", 3, (2, 4), ("structured", "decoder"))
    assert (spec.shrink, spec.vary_config, spec.log_limit_mb, spec.runner_pid) == (False, False, 0.5, 4242)
    spec.write(tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text()) == ON_DISK


def test_a_spec_without_a_required_key_is_refused(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({k: v for k, v in ON_DISK.items() if k != "out"}))
    with pytest.raises(KeyError, match="out"):
        WorkerSpec.read(path)
    # Optional keys take the defaults the dict reads had (`shrink` True, the log limit 8 MiB).
    short = {k: ON_DISK[k] for k in ("engine", "worker", "budget_s", "seed", "out", "work")}
    path.write_text(json.dumps(short))
    spec = WorkerSpec.read(path)
    assert spec.shrink is True and spec.log_limit_mb == 8.0
