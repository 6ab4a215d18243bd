"""The nightly runner end to end: a clean run, a candidate that aborts its process on some sizes,
one that hangs, a second run on the first one's corpus and database, Ctrl-C, and a harness error.
Each run is a separate `kimi-oracle nightly` process.

Nothing here depends on the machine's speed: runs end after `--max-examples` examples per worker
(the budget is only a safety net far above what they need), and Ctrl-C is sent once the run's own
status files show that examples were judged."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import click
import pytest
from nightly_helpers import FUZZ, REPO, planted, run_nightly

from kimi_oracle.cli.nightly import _duration
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.harnesses import structured_case
from kimi_oracle.inputs.corpus import entries, seed_files, structured_seeds
from kimi_oracle.oracle import checks
from kimi_oracle.workflows import nightly
from kimi_oracle.workflows.nightly import (
    FINDING_KINDS,
    UnknownCheckError,
    collect_findings,
    finding_entry,
    plan_jobs,
    prepare_corpus,
)

REQUIRED_VERSIONS = {"python", "kimi-oracle", "Pillow", "numpy", "torch", "triton", "atheris"}
# A safety net only: every run below ends on its example count long before this.
SAFETY_BUDGET = "10m"
# How long a test waits for a run to show progress before it gives up (a hung run, not a slow one).
PATIENCE_S = 600


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _check_complete(out: Path, s: dict) -> None:
    """The summary is complete and the three reports agree."""
    assert s["schema"] == "kimi-oracle.nightly-summary" and s["schema_version"] == 1
    for key in ("candidate", "profile", "start_time", "end_time", "budget_s", "engines", "findings", "versions"):
        assert key in s, key
    assert REQUIRED_VERSIONS <= set(s["versions"])
    for name, info in s["engines"].items():
        assert "examples" in info and "coverage" in info, name
    for f in s["findings"]:
        assert set(f) >= {"id", "engine", "kind", "check", "path", "root_causes", "max_levels", "mean_levels",
                          "residual_max_levels"}
        assert f["kind"] in FINDING_KINDS and f["engine"] in s["engines"]
        assert (Path(f["path"]) / "case.json").is_file()
    suite = ET.parse(out / "junit.xml").getroot()
    cases = list(suite.iter("testcase"))
    # The root-cause cases come first (one per root cause and mode class), then one case per check.
    by_cause = [c for c in cases if c.get("name").startswith("root-cause ")]
    assert len(by_cause) == len(s["root_causes"]) and cases[: len(by_cause)] == by_cause
    failures = sum(1 for c in cases[len(by_cause):] if c.find("failure") is not None)
    assert failures == len({f["kind"] for f in s["findings"]})
    md = (out / "summary.md").read_text()
    assert s["candidate"] in md and f"findings: **{len(s['findings'])}**" in md


def test_nightly_durations():
    # --budget and --case-timeout take the CLI's common duration syntax.
    assert _duration(None, None, "90") == 90 and _duration(None, None, "90s") == 90
    assert _duration(None, None, "30m") == 1800 and _duration(None, None, "1.5h") == 5400
    assert _duration(None, None, None) is None
    for bad in ("", "abc", "0s", "-5"):
        with pytest.raises(click.BadParameter):
            _duration(None, None, bad)


def test_plan_jobs_shares_the_budget():
    assert plan_jobs(["hypothesis", "atheris"], 1, 60) == [[("hypothesis", 30)], [("atheris", 30)]]
    assert plan_jobs(["hypothesis", "atheris"], 2, 60) == [[("hypothesis", 60), ("atheris", 60)]]
    assert plan_jobs(["hypothesis", "atheris"], 3, 60) == [[("hypothesis", 60), ("atheris", 60), ("hypothesis", 60)]]
    assert plan_jobs(["atheris"], 1, 10) == [[("atheris", 10)]]


def _structured_inputs(wanted: dict) -> dict:
    """name -> the first committed structured input whose case (under k3-small, as the runs
    below draw them) satisfies the predicate `wanted[name]` on its images' parameters."""
    base = PreprocessConfig.k3_small()
    found = {}
    for path in entries(FUZZ / "corpus" / "structured"):
        images = structured_case(path.read_bytes(), base)[0].images
        for name, predicate in wanted.items():
            if name not in found and predicate(images):
                found[name] = path
    assert set(found) == set(wanted), f"no committed structured input for {set(wanted) - set(found)}"
    return found


def _small_corpus(root: Path, structured: dict, decoder: list) -> Path:
    """A starting corpus of a few committed inputs, so that the atheris engine's replay of it is
    short (an empty corpus is seeded with ~120 inputs: test_an_empty_corpus_is_seeded)."""
    corpus = root / "corpus"
    for name, paths in (("structured", _structured_inputs(structured).values()),
                        ("decoder", [FUZZ / "corpus" / "decoder" / n for n in decoder])):
        (corpus / name).mkdir(parents=True)
        for path in paths:
            (corpus / name / path.name).write_bytes(path.read_bytes())
    return corpus


def _any_wide(limit: int):
    return lambda images: any(p.width > limit for p in images)


def test_an_empty_corpus_is_seeded_and_a_filled_one_is_kept(tmp_path):
    corpus = tmp_path / "corpus"
    counts = prepare_corpus(corpus, ("structured", "decoder"))

    def contents(directory: Path) -> set:
        return {p.read_bytes() for p in entries(directory)}

    # committed corpus plus the generated seeds
    assert contents(corpus / "structured") == contents(FUZZ / "corpus" / "structured") | set(structured_seeds().values())
    assert contents(corpus / "decoder") == contents(FUZZ / "corpus" / "decoder") | set(seed_files().values())
    assert counts == {"structured": len(entries(corpus / "structured")), "decoder": len(entries(corpus / "decoder"))}
    small = _small_corpus(tmp_path / "small", {"any": lambda images: True}, ["bmp_rgb_5x3.bmp"])
    assert prepare_corpus(small, ("structured", "decoder")) == {"structured": 1, "decoder": 1}


def test_finding_kinds_are_the_oracles():
    # One definition: the summary files findings under the oracle's own list of checks.
    assert nightly.FINDING_KINDS is checks.FINDING_KINDS


def _case(folder: Path, check: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "case.json").write_text(json.dumps({"id": folder.name, "check": check, "engine": "hypothesis",
                                                  "message": f"planted {check}"}))
    return folder


def test_an_unknown_check_is_an_error_never_a_crash(tmp_path):
    crash = _case(tmp_path / "findings" / "crash-1", "crash")
    reported = _case(tmp_path / "findings" / "odd-1", "made_up_check")
    unreported = _case(tmp_path / "findings" / "odd-2", "another_made_up_check")  # a killed worker's
    with pytest.raises(UnknownCheckError, match="made_up_check"):
        finding_entry(reported)
    assert finding_entry(crash)["kind"] == "crash"
    errors: list[str] = []
    found = collect_findings(tmp_path, [("hypothesis", {"path": str(reported)}), ("hypothesis", {"path": str(crash)})],
                             set(), errors)
    assert sorted(found) == ["crash-1"] and found["crash-1"]["kind"] == "crash"
    assert len(errors) == 2
    assert any("odd-1" in e and "'made_up_check'" in e for e in errors)
    assert any("odd-2" in e and "'another_made_up_check'" in e for e in errors)
    assert str(unreported) in " ".join(errors)


def test_reference_runs_clean(tmp_path):
    # --config instead of a profile: the runner and both engines resolve it like every command.
    config = tmp_path / "small_preprocessor_config.json"
    config.write_text(json.dumps(PreprocessConfig.k3_small().to_hf_json()))
    out = tmp_path / "run"
    corpus = _small_corpus(tmp_path, {"wide": _any_wide(20), "narrow": lambda images: not _any_wide(20)(images)},
                           ["bmp_rgb_5x3.bmp", "png_p_trns_key_29x17.png"])
    proc = run_nightly("--budget", SAFETY_BUDGET, "--max-examples", "20", "--out", str(out), "--config", str(config),
                       "--corpus", str(corpus), "--case-timeout", "5s", "--seed", "3", "--jobs", "2",
                       timeout=PATIENCE_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    _check_complete(out, s)
    assert s["findings"] == [] and s["errors"] == [] and s["stopped"] == "examples"
    assert s["profile"] == "small_preprocessor_config" and s["config"] == json.loads(config.read_text())
    assert set(s["engines"]) == {"hypothesis", "atheris"}
    assert s["engines"]["hypothesis"]["examples"] >= 20
    assert s["engines"]["atheris"]["examples"] >= 2 * 20  # each harness: its starting corpus, then 20 more
    # Each hypothesis worker's CPU split (issue 33.1): the fuzzing process' and its candidate's.
    cpu = s["engines"]["hypothesis"]["cpu"]
    assert len({row["worker"] for row in cpu}) == len(cpu) == s["engines"]["hypothesis"]["workers"]
    for row in cpu:  # (both processes worked: the reference here, `reference` in the executor)
        assert row["oracle_s"] > 0 and row["candidate_s"] > 0 and row["search"]["oracle_ms_per_example"] > 0
    assert "cpu" not in s["engines"]["atheris"]


ABORT_EXAMPLES = 12  # per worker (each abort restarts the candidate's process: the cost of this run)


@pytest.fixture(scope="module")
def aborting_run(tmp_path_factory):
    """One campaign against a candidate that calls os.abort() on widths that are multiples of 7."""
    root = tmp_path_factory.mktemp("abort")
    out = root / "run1"
    # Both harnesses start from an input the candidate aborts on, and one it does not.
    _small_corpus(root, {"x7": lambda images: any(p.width % 7 == 0 for p in images),
                         "ok": lambda images: all(p.width % 7 for p in images)},
                  ["tiff_f_7x9.tif", "bmp_rgb_5x3.bmp"])
    proc = run_nightly("--budget", SAFETY_BUDGET, "--max-examples", str(ABORT_EXAMPLES), "--out", str(out),
                       "--profile", "k3-small", "--case-timeout", "5s", "--candidate", planted("aborting"),
                       "--corpus", str(root / "corpus"), "--db", str(root / "db"), "--seed", "11", "--jobs", "2",
                       timeout=PATIENCE_S)
    return root, out, proc


def test_abort_is_a_crash_finding_and_the_run_completes(aborting_run):
    root, out, proc = aborting_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    s = _summary(out)
    _check_complete(out, s)
    assert s["stopped"] == "examples" and s["errors"] == []
    crashes = [f for f in s["findings"] if f["kind"] == "crash"]
    assert {f["engine"] for f in crashes} == {"hypothesis", "atheris"}
    for f in crashes:
        case = json.loads((Path(f["path"]) / "case.json").read_text())
        assert "SIGABRT" in case["message"]
        # the input that caused it is stored, and it really has a width that is a multiple of 7
        assert any(img["size"][0] % 7 == 0 for img in case["images"])
        assert any(p.name.startswith("input") for p in Path(f["path"]).iterdir())
    atheris_crash = next(f for f in crashes if f["engine"] == "atheris")
    assert (Path(atheris_crash["path"]) / "fuzz-input.bin").is_file()
    # Both engines kept going after a crash: each met it more than once (one cause, one finding per
    # engine: crashes are keyed by their exception and message), and ran all its examples.
    for engine in ("hypothesis", "atheris"):
        assert sum(f["hits"] for f in crashes if f["engine"] == engine) >= 2, engine
    assert s["engines"]["hypothesis"]["examples"] >= ABORT_EXAMPLES and s["engines"]["atheris"]["examples"] >= 2 * ABORT_EXAMPLES


@pytest.mark.slow  # a third nightly process run (~11 s); tests/cli covers a second run refused on one --out
def test_second_run_reuses_corpus_and_database(aborting_run):
    root, out1, _ = aborting_run
    first = _summary(out1)
    out2 = root / "run2"
    proc = run_nightly("--budget", SAFETY_BUDGET, "--max-examples", "10", "--out", str(out2), "--profile", "k3-small",
                       "--case-timeout", "5s", "--candidate", planted("aborting"), "--corpus", str(root / "corpus"),
                       "--db", str(root / "db"), "--seed", "12", "--jobs", "2", timeout=PATIENCE_S)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    second = _summary(out2)
    _check_complete(out2, second)
    db1 = first["engines"]["hypothesis"]["database"]
    db2 = second["engines"]["hypothesis"]["database"]
    assert db1["entries_after"] > 0 and db2["entries_before"] == db1["entries_after"]
    corpus1 = first["engines"]["atheris"]["corpus"]
    corpus2 = second["engines"]["atheris"]["corpus"]
    for name in corpus1:
        assert corpus2[name]["before"] == corpus1[name]["after"]
    assert any(v["added"] > 0 for v in corpus1.values())
    # The database replays the crashes first: one is found at the very first example.
    hyp = [f for f in second["findings"] if f["engine"] == "hypothesis" and f["kind"] == "crash"]
    assert hyp
    found_at = [json.loads((Path(f["path"]) / "case.json").read_text())["example"] for f in hyp]
    assert min(found_at) == 1


@pytest.mark.slow  # tests/cli/test_gate_golden_nightly.py::test_nightly_hang_is_a_timeout runs in the default suite
def test_hang_is_a_timeout_finding_and_the_run_completes(tmp_path):
    out = tmp_path / "run"
    # Every input the candidate hangs on costs a case timeout: start from one such structured
    # input, one it answers, and a decoder input 5 pixels wide.
    corpus = _small_corpus(tmp_path, {"wide": _any_wide(20), "narrow": lambda images: not _any_wide(20)(images)},
                           ["bmp_rgb_5x3.bmp"])
    proc = run_nightly("--budget", SAFETY_BUDGET, "--max-examples", "3", "--no-shrink", "--out", str(out),
                       "--profile", "k3-small", "--case-timeout", "1s", "--candidate", planted("hanging"),
                       "--corpus", str(corpus), "--seed", "5", "--jobs", "2", timeout=PATIENCE_S)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    s = _summary(out)
    _check_complete(out, s)
    assert s["stopped"] == "examples" and s["errors"] == []
    timeouts = [f for f in s["findings"] if f["kind"] == "timeout"]
    assert timeouts and not [f for f in s["findings"] if f["kind"] == "crash"]
    assert {f["engine"] for f in timeouts} == {"hypothesis", "atheris"}
    for f in timeouts:
        case = json.loads((Path(f["path"]) / "case.json").read_text())
        assert any(img["size"][0] > 20 for img in case["images"])
        assert "hanging" in (Path(f["path"]) / "report.md").read_text()  # where it hung


def _read_status(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def test_ctrl_c_still_writes_a_complete_summary(tmp_path):
    out = tmp_path / "run"
    log = open(tmp_path / "nightly.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "kimi_oracle", "nightly", "--budget", SAFETY_BUDGET,
                             "--out", str(out), "--profile", "k3-small", "--jobs", "2", "--case-timeout", "5s"],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        # Ctrl-C once both workers are up and the hypothesis worker has judged an example
        # (its status file says so), however long that takes on this machine.
        limit = time.monotonic() + PATIENCE_S
        judged = 0
        while proc.poll() is None and time.monotonic() < limit:
            statuses = {p.parent.name: _read_status(p) for p in (out / "work").glob("w*/status.json")}
            judged = sum(int(st.get("calls", 0)) for name, st in statuses.items() if name.endswith("-hypothesis"))
            if len(statuses) == 2 and judged > 0:
                break
            time.sleep(0.2)
        assert proc.poll() is None and judged > 0, "no example judged; see " + str(tmp_path / "nightly.log")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
    assert proc.returncode == 130, (tmp_path / "nightly.log").read_text()
    s = _summary(out)
    _check_complete(out, s)
    assert s["stopped"] == "interrupted" and s["findings"] == [] and s["errors"] == []
    # What was judged before Ctrl-C is in the summary.
    assert s["engines"]["hypothesis"]["calls"] >= judged
    assert s["engines"]["hypothesis"]["examples"] > 0


def test_bad_candidate_is_a_harness_error(tmp_path):
    out = tmp_path / "run"
    proc = run_nightly("--budget", SAFETY_BUDGET, "--max-examples", "5", "--out", str(out), "--profile", "k3-small",
                       "--engines", "hypothesis", "--candidate", "no_such_module_xyz:fn", timeout=PATIENCE_S)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["errors"] and "no_such_module_xyz" in s["errors"][0]
    assert s["findings"] == []
    assert ET.parse(out / "junit.xml").getroot().get("errors") == "1"


def test_usage_errors_exit_2(tmp_path, capsys):
    from kimi_oracle.cli import main

    (tmp_path / "c.json").write_text(json.dumps(PreprocessConfig.k3_small().to_hf_json()))
    for args in (["--shard", "3/2"], ["--engines", "afl"], ["--budget", "soon"], ["--max-examples", "0"],
                 ["--profile", "k3", "--config", str(tmp_path / "c.json")]):
        # (--max-examples 1 as well: should a check ever let the run start, it ends at once)
        with pytest.raises(SystemExit) as info:
            main(["nightly", "--out", str(tmp_path / "x"), "--max-examples", "1", *args])
        assert info.value.code == 2, (args, capsys.readouterr().err)
    assert not (tmp_path / "x" / "summary.json").exists()
