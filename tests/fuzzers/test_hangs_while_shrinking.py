"""A hang met while shrinking or replaying is still a `timeout` finding (exit 1), never a harness
error: hypothesis giving up (Unsatisfiable when every replay of a hanging mode class is skipped,
Flaky* when a candidate answers differently) leaves the smallest case so far as the finding.

The engine's tests use an in-process candidate whose call on a palette image ends as the
sandbox's timeout does (`CandidateTimeout`, without the wait); the CLI tests run the real hang
under a 1 s case timeout, bounded by example counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import exit_code_of as run_cli
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.fuzzers.sandbox import CandidateTimeout
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.pipelines import reference

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
HOSTILE = HELPERS / "hostile_candidates.py"


class _TimedOutCall:
    def __init__(self, spec: str):
        self.spec = spec

    def result(self):
        raise CandidateTimeout(self.spec, "CallTimedOut", "no answer within 1 s (waited 1.0 s); the process was killed",
                               "(no Python stack was recorded)", timeout_s=1.0)


class HangsOnPalette(Candidate):
    """Times out on every batch holding a palette image (flaky: only from the `after`-th such call on,
    when given)."""

    def __init__(self, after: int = 0):
        super().__init__("hangs-on-palette", reference.preprocess)
        self.after, self.palette_calls = after, 0

    def start_call(self, images, config):
        if any(img.mode == "P" for img in images):
            self.palette_calls += 1
            if self.palette_calls > self.after:
                return _TimedOutCall(self.spec)
        return super().start_call(images, config)


def _options(**kw) -> FuzzOptions:
    return FuzzOptions(examples=12, seed=1, max_images=1, max_side=24, modes=("P", "RGB"), invariance=False,
                       vary_config=False, **kw)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_hang_is_a_timeout_finding_when_it_is_shrunk(seed, tmp_path):
    opts = _options()
    opts.seed = seed
    run = fuzz(HangsOnPalette(), PreprocessConfig.resolve("k3-small"), opts, out_dir=tmp_path)
    assert run.findings and {f.check for f in run.findings} == {"timeout"}, run.findings
    assert run.failed
    assert all(f.images[0].mode == "P" for f in run.findings)
    assert any(p.name.startswith("timeout-") for p in (tmp_path / "findings").iterdir())


def test_a_hang_met_only_while_shrinking_still_ends_in_findings(tmp_path):
    # The first palette call answers; every later one (the shrink's) times out: hypothesis sees
    # the candidate flaky, the finding stands.
    run = fuzz(HangsOnPalette(after=1), PreprocessConfig.resolve("k3-small"), _options(), out_dir=tmp_path)
    assert run.findings and {f.check for f in run.findings} <= {"timeout", "pixel_mismatch", "crash"}



@pytest.mark.slow
def test_fuzz_cli_hang_with_shrinking_is_exit_1(tmp_path, capsys):
    code = run_cli("fuzz", "--candidate", f"{HOSTILE}:hang", "--profile", "k3-small", "--case-timeout", "1s",
                   "--max-images", "1", "--max-side", "24", "--modes", "P,RGB", "--no-invariance",
                   "--fixed-config", "--examples", "6", "--seed", "1", "--out", tmp_path / "out",
                   "--json", tmp_path / "s.json")
    err = capsys.readouterr().err
    assert code == 1, err
    assert "internal error" not in err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert "timeout" in [f["check"] for f in summary["findings"]], summary


@pytest.mark.slow
def test_a_hanging_new_fails_the_gate_with_its_timeout_finding(tmp_path, capsys):
    code = run_cli("gate", "--candidate", f"{HOSTILE}:hang", "--profile", "k3-small", "--case-timeout", "1s",
                   "--fuzz-examples", "4", "--seed", "1", "--budget", "10m", "--out", tmp_path / "g")
    err = capsys.readouterr().err
    assert code == 1, err
    report = json.loads((tmp_path / "g" / "gate-report.json").read_text())
    assert report["verdict"] == "fail"
    fuzz_stage = report["stages"]["fuzz"]
    assert fuzz_stage["status"] == "fail", fuzz_stage
