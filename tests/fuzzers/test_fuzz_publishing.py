"""fuzz(): a new group's cost is bounded (diagnosed when published, within a share of the
budget, reused from the database), findings are written off the search path, and `time` says
where the run's time went. Injected clocks and counts, never timing."""

from __future__ import annotations

import json

import pytest

from kimi_oracle.cli import main
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.fuzzers import fuzzing, publishing, settle
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.pipelines import reference

CONFIG = PreprocessConfig.k3_small()


def _half_level_off(images, config):
    """The reference, half a level off everywhere: a pixel mismatch in every mode class."""
    out = reference.preprocess(images, config)
    out.pixel_values = out.pixel_values + 1.0 / 255
    return out


class _Clock:
    """Time that moves only when told: 50 ms a candidate call, `diagnosis_s` a diagnosis."""

    def __init__(self, diagnosis_s: float):
        self.now = 0.0
        self.diagnosis_s = diagnosis_s

    def __call__(self) -> float:
        return self.now

    def candidate(self, images, config):
        self.now += 0.05
        return _half_level_off(images, config)


@pytest.fixture
def diagnoses(monkeypatch):
    """The attributions made (calls of finding_diagnosis with a result to attribute)."""
    made: list[str] = []
    real = fuzzing.finding_diagnosis

    def counting(check, stats, images, config, expected=None, actual=None, **more):
        if actual is not None:
            made.append(check)
            clock = counting.clock
            if clock is not None:
                clock.now += clock.diagnosis_s
        return real(check, stats, images, config, expected=expected, actual=actual, **more)

    counting.clock = None
    monkeypatch.setattr(settle, "finding_diagnosis", counting)
    return counting, made


def test_diagnoses_take_at_most_their_share_of_the_budget_whatever_one_costs(diagnoses):
    counting, made = diagnoses
    clock = counting.clock = _Clock(diagnosis_s=1.0)  # each attribution "costs" a whole second
    budget = 20.0
    run = fuzz(Candidate("off", clock.candidate), CONFIG,
               FuzzOptions(budget_s=budget, seed=3, max_side=40, invariance=False, clock=clock))
    pixel = [f for f in run.findings if f.check == "pixel_mismatch"]
    assert len(pixel) >= 4  # more groups than the share can diagnose at a second each
    # 10 % of 20 s at 1 s an attribution: two (a group's shrunk case, its first case's for the
    # causes shrinking lost), then the others are published without one.
    assert len(made) == round(fuzzing.DIAGNOSIS_SHARE * budget / clock.diagnosis_s) == 2
    deferred = [f for f in pixel if (f.attribution or {}).get("deferred")]
    assert len(pixel) - 2 <= len(deferred) < len(pixel) and all(f.root_causes == [] for f in deferred)
    assert run.elapsed_s <= budget * 1.05


def test_an_examples_run_diagnoses_each_reported_group_once(diagnoses):
    _, made = diagnoses
    run = fuzz(Candidate("off", _half_level_off), CONFIG,
               FuzzOptions(examples=60, seed=3, max_side=40, invariance=False, shrink=False))
    pixel = [f for f in run.findings if f.check == "pixel_mismatch"]
    # Not shrunk: the first case is the finding, attributed once when published (before: once
    # when met, and a group met again was not attributed again but its first case was).
    assert pixel and len(made) == len(pixel)
    assert all(f.root_causes and not (f.attribution or {}).get("deferred") for f in pixel)


def test_a_database_remembers_diagnoses_of_the_same_cases(diagnoses, tmp_path):
    _, made = diagnoses
    options = FuzzOptions(examples=40, seed=5, max_side=40, invariance=False, shrink=False, db_dir=tmp_path / "db")
    first = fuzz(Candidate("off", _half_level_off), CONFIG, options)
    assert made and list((tmp_path / "db-diagnoses").iterdir())
    assert not (tmp_path / "db" / "diagnoses").exists()  # the database holds hypothesis' entries only
    made.clear()
    again = fuzz(Candidate("off", _half_level_off), CONFIG, options)
    assert again.replayed > 0 and made == []  # every reported case was diagnosed by the first run
    causes = sorted((f.key, tuple(f.root_causes)) for f in first.findings)
    assert sorted((f.key, tuple(f.root_causes)) for f in again.findings) == causes


def test_a_stored_diagnosis_of_other_code_or_shape_is_not_reused(tmp_path):
    store = publishing.DiagnosisStore(tmp_path / "db")
    key = store.key(b"ns", (1, 2, 3), ("a", "b"))
    assert key != store.key(b"ns", (1, 2, 4), ("a", "b")) != store.key(b"other", (1, 2, 3), ("a", "b"))
    fields = {k: None for k in publishing.DIAGNOSIS_FIELDS} | {"root_causes": ["alpha-straight"]}
    store.put(key, fields)
    assert store.get(key) == fields
    (tmp_path / "db-diagnoses" / f"{key}.json").write_text(json.dumps({"key": key, "fields": {"root_causes": [1]}}))
    assert store.get(key) is None
    (tmp_path / "db-diagnoses" / f"{key}.json").write_text("{not json")
    assert store.get(key) is None


def test_findings_are_all_on_disk_when_fuzz_returns_and_a_write_error_is_raised(tmp_path, monkeypatch):
    run = fuzz(Candidate("off", _half_level_off), CONFIG,
               FuzzOptions(examples=30, seed=3, max_side=40, invariance=False, shrink=False), out_dir=tmp_path)
    folders = [p for p in (tmp_path / "findings").iterdir() if (p / "case.json").is_file()]
    assert run.findings and len(folders) == len(run.findings)

    def full_disk(out_dir, finding):
        raise InputError("no space left on device")

    monkeypatch.setattr(settle, "write_finding", full_disk)
    with pytest.raises(InputError, match="no space left"):
        fuzz(Candidate("off", _half_level_off), CONFIG,
             FuzzOptions(examples=30, seed=3, max_side=40, invariance=False, shrink=False), out_dir=tmp_path / "b")


def test_fuzz_json_says_where_the_time_went(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fuzz", "--candidate", "reference", "--examples", "30", "--seed", "1", "--out", str(tmp_path),
              "--json", str(tmp_path / "run.json")])
    assert exc.value.code == 0, capsys.readouterr()
    summary = json.loads((tmp_path / "run.json").read_text())
    time = summary["time"]
    assert tuple(time) == publishing.TIME_KEYS == ("candidate", "reference", "diagnosis", "shrinking", "writing",
                                                   "harness")
    assert all(isinstance(v, float) and v >= 0 for v in time.values())
    # The candidate ran in its executor (its spans were kept), the reference in this process.
    assert time["candidate"] > 0 and time["reference"] > 0
    assert time["harness"] <= summary["elapsed_s"] + 0.5


def test_an_in_process_candidate_has_no_time_of_its_own():
    run = fuzz(Candidate("ref", reference.preprocess), CONFIG, FuzzOptions(examples=10, seed=1, max_side=24))
    assert run.time["candidate"] is None and run.time["reference"] > 0
    assert run.summary()["time"] == run.time


def test_without_a_share_every_reported_finding_is_diagnosed(diagnoses):
    # The gate's absolute fuzz stage (its verdict reads every finding's root causes).
    counting, made = diagnoses
    clock = counting.clock = _Clock(diagnosis_s=1.0)
    run = fuzz(Candidate("off", clock.candidate), CONFIG,
               FuzzOptions(budget_s=5.0, seed=3, max_side=40, invariance=False, clock=clock, diagnosis_share=None))
    pixel = [f for f in run.findings if f.check == "pixel_mismatch"]
    assert len(pixel) >= 3 and len(made) >= len(pixel)
    assert not any((f.attribution or {}).get("deferred") for f in pixel)


def test_repro_diagnoses_a_finding_whose_diagnosis_was_deferred(tmp_path, capsys):
    from pathlib import Path

    planted = str(Path(__file__).resolve().parents[1] / "mutants" / "planted.py") + ":chessboard_flipped"
    run = fuzz(planted, PreprocessConfig.k3(),
               FuzzOptions(examples=8, budget_s=1000.0, seed=3, max_side=40, invariance=False, shrink=False,
                           modes=("RGBA",), diagnosis_share=0.0, clock=lambda: 0.0), out_dir=tmp_path)
    [finding] = [f for f in run.findings if f.check == "pixel_mismatch"][:1]
    assert finding.root_causes == [] and finding.attribution["deferred"]
    with pytest.raises(SystemExit) as exc:
        main(["repro", str(finding.path), "--json", str(tmp_path / "repro.json")])
    assert exc.value.code == 1
    assert "root causes: " in capsys.readouterr().out
    assert json.loads((tmp_path / "repro.json").read_text())["root_causes"]
