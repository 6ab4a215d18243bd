"""`kimi-oracle engines` and the real engines' planners and errors through the CLI (issue 31)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kimi_oracle", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def test_engines_lists_every_path_and_where_it_loads_from():
    proc = _cli("engines", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {(r["engine"], r["role"]) for r in rows} >= {("sglang", "planner"), ("sglang", "candidate"),
                                                       ("sglang", "request engine"), ("transformers", "planner"),
                                                       ("vllm", "candidate")}
    # none is installed in the test environment: each says why it cannot load as ENGINE alone; the
    # engines with nothing to adapt (NeMo Automodel, smg) are listed as such, never loaded
    assert all(r["version"] or r["loads_from"].startswith("not loadable:") for r in rows if r["role"] != "none")
    assert {r["engine"] for r in rows if r["role"] == "none"} == {"nemo-automodel", "smg"}


def test_the_transformers_planner_ignores_fixed_output_tokens(transformers_tree, tmp_path):
    proc = _cli("fuzz", "--planner", "transformers@5.23.0", "--planner-sizes", "3000", "--seed", "3",
                "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fails = [line for line in proc.stdout.splitlines() if line.startswith("FAIL planner_mismatch")]
    # the only failing field is the token count, and its first example has a fixed token count set
    assert len(fails) == 1 and fails[0].startswith("FAIL planner_mismatch[num_tokens]") and "fixed tokens" in fails[0]
    assert "the planner ignores fixed_output_tokens (" in fails[0]  # the cause, by name


def test_an_unknown_release_is_exit_2_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("KIMI_ORACLE_ENGINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no network needed: pip finds nothing
    proc = _cli("fuzz", "--planner", "sglang@0.0.1", "--planner-sizes", "10")
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "pip download --no-deps sglang==0.0.1 failed" in errors[0]


@pytest.fixture
def transformers_tree():
    from kimi_oracle.adapters.sources import locate
    from kimi_oracle.core.errors import CandidateError

    try:
        return locate("transformers", "transformers", "5.23.0")
    except CandidateError as exc:
        pytest.skip(f"transformers==5.23.0 cannot be fetched here: {exc}")
