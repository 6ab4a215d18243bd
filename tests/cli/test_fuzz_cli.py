"""`kimi-oracle fuzz`, `repro` and `check` end to end, in process."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PIL import Image

from cli_run import exit_code_of as run_cli
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.inputs.generators import CaseParams, make_image

PLANTED = str(Path(__file__).resolve().parents[1] / "mutants" / "planted.py")



def test_reference_fuzzes_clean(tmp_path, capsys):
    code = run_cli("fuzz", "--candidate", "reference", "--examples", "40", "--seed", "1", "--out", tmp_path,
                   "--json", tmp_path / "run.json", "--junit", tmp_path / "junit.xml")
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["findings"] == [] and summary["examples"] >= 30 and summary["seed"] == 1
    assert summary["candidate"] == "reference" and summary["profile"] == "k3"
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    # One test case per check class: the four differential checks, invariance, crash, timeout,
    # accepts_invalid.
    assert suite.get("tests") == "8" and suite.get("failures") == "0"
    assert "pixel_mismatch" in out and "FAIL" not in out


def test_mutant_found_then_replayed(tmp_path, capsys):
    code = run_cli("fuzz", "--candidate", f"{PLANTED}:drop_patch_row", "--examples", "30", "--seed", "2",
                   "--out", tmp_path, "--json", tmp_path / "run.json")
    assert code == 1
    summary = json.loads((tmp_path / "run.json").read_text())
    [finding] = summary["findings"]
    assert finding["check"] == "feature_length"
    path = Path(finding["path"])
    assert (path / "case.json").is_file() and (path / "input.png").is_file()
    capsys.readouterr()

    assert run_cli("repro", path) == 1
    assert "still fails: feature_length" in capsys.readouterr().out
    assert run_cli("repro", path / "case.json", "--candidate", "reference") == 0
    assert "fixed" in capsys.readouterr().out
    # Without the input file the image is regenerated from its parameters.
    (path / "input.png").unlink()
    assert run_cli("repro", path) == 1
    assert "regenerated from its parameters" in capsys.readouterr().out


def test_repro_reproduces_pixel_statistics_exactly(tmp_path, capsys):
    code = run_cli("fuzz", "--candidate", f"{PLANTED}:palette_bicubic", "--modes", "P,1", "--examples", "150",
                   "--seed", "0", "--max-side", "48", "--out", tmp_path, "--json", tmp_path / "run.json",
                   "--no-invariance")
    assert code == 1
    summary = json.loads((tmp_path / "run.json").read_text())
    finding = summary["findings"][0]
    assert finding["check"] == "pixel_mismatch" and finding["group"].startswith("pixel_mismatch[")
    path = Path(finding["path"])
    recorded = json.loads((path / "stats.json").read_text())["stats"]
    assert run_cli("repro", path, "--json", tmp_path / "repro.json") == 1
    replayed = json.loads((tmp_path / "repro.json").read_text())["verdict"]["stats"]
    for key in ("max_level_diff", "failing", "differing", "worst", "histogram"):
        assert replayed[key] == recorded[key], key


@pytest.mark.parametrize("args, message", [
    (["--candidate", "nope"], "bad candidate spec"),
    (["--candidate", "reference", "--tolerance", "levels:x"], "levels:K"),
    (["--candidate", "reference", "--budget", "soon"], "'soon': expected a duration"),
    (["--candidate", "reference", "--modes", "RGB,XYZ"], "unknown mode"),
    (["--candidate", "reference", "--profile", "k4"], "k4"),
])
def test_usage_errors_exit_2(tmp_path, capsys, args, message):
    assert run_cli("fuzz", *args, "--examples", "2", "--out", tmp_path) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert not (tmp_path / "findings").exists()


def test_wrong_return_type_is_a_harness_error(tmp_path, capsys):
    cand = tmp_path / "bad.py"
    cand.write_text("def f(images, config):\n    return {'pixel_values': 1}\n")
    assert run_cli("fuzz", "--candidate", f"{cand}:f", "--examples", "5", "--out", tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: candidate") and "PreprocessResult" in err[0]


class _TickingClock:
    """A fake clock that advances a fixed step every time it is read (no real time involved)."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_budget_stops_the_run_by_its_clock():
    clock = _TickingClock(0.01)
    run = fuzz("reference", PreprocessConfig.k3_small(), FuzzOptions(budget_s=0.5, seed=4, clock=clock))
    assert run.stopped == "budget" and run.findings == []
    # The budget is read once per example: 0.5 s of 0.01 s ticks ends the run after ~50 reads.
    assert 5 < run.calls <= 60 and 0.5 <= run.elapsed_s <= 0.5 * 1.05 + 0.02


def test_budget_option_of_the_cli(tmp_path, capsys):
    code = run_cli("fuzz", "--candidate", "reference", "--budget", "1s", "--seed", "4", "--out", tmp_path,
                   "--json", tmp_path / "run.json")
    assert code == 0
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["stopped"] == "budget"  # the option reaches the run (its clock is tested above)


def test_database_replays_failures_first(tmp_path):
    from mutants.planted import BY_NAME

    from kimi_oracle.oracle.candidates import Candidate

    mutant = Candidate("fill_before_resize", BY_NAME["fill_before_resize"])
    options = dict(examples=300, max_side=48, db_dir=tmp_path / "db", invariance=False, keep_searching=False,
                   split_by_mode=False)
    first = fuzz(mutant, PreprocessConfig.k3(), FuzzOptions(seed=11, **options))
    assert first.first_found.get("pixel_mismatch", 0) > 1
    # A fixed seed does not switch the database off: the failure was saved ...
    assert any(p.is_file() for p in (tmp_path / "db").rglob("*"))
    # ... and the next run replays it first, with the same seed or another one.
    for seed in (11, 12345):
        again = fuzz(mutant, PreprocessConfig.k3(), FuzzOptions(seed=seed, **options))
        assert again.first_found["pixel_mismatch"] == 1
    # Without the database the same seed needs as many examples as the first time.
    control = fuzz(mutant, PreprocessConfig.k3(), FuzzOptions(seed=11, **{**options, "db_dir": None}))
    assert control.first_found["pixel_mismatch"] == first.first_found["pixel_mismatch"]


def _write_images(folder: Path) -> None:
    folder.mkdir()
    make_image(CaseParams(90, 60, "RGBA", "random", "noise", seed=1)).save(folder / "rgba.png")
    make_image(CaseParams(40, 30, "P", "checker", "edges", seed=2)).save(folder / "pal.png")
    make_image(CaseParams(64, 48, "RGB", content="gradient", seed=3)).save(folder / "photo.jpg", quality=90)


def test_check_real_files(tmp_path, capsys):
    folder = tmp_path / "imgs"
    _write_images(folder)
    assert run_cli("check", folder, "--candidate", "reference", "--profile", "k3-small", "--out", tmp_path / "o") == 0
    out = capsys.readouterr().out
    assert "rgba.png" in out and "photo.jpg" in out

    code = run_cli("check", folder, "--candidate", f"{PLANTED}:straight_alpha", "--profile", "k3-small",
                   "--out", tmp_path / "o", "--json", tmp_path / "check.json", "--junit", tmp_path / "j.xml")
    assert code == 1
    summary = json.loads((tmp_path / "check.json").read_text())
    [finding] = summary["findings"]
    assert finding["check"] == "pixel_mismatch" and finding["sources"] == [str(folder / "rgba.png")]
    path = Path(finding["path"])
    case = json.loads((path / "case.json").read_text())
    assert case["images"][0]["source"] == str(folder / "rgba.png")
    assert (path / case["images"][0]["original_file"]).read_bytes() == (folder / "rgba.png").read_bytes()
    capsys.readouterr()
    assert run_cli("repro", path) == 1


def test_check_unreadable_file_exits_2(tmp_path, capsys):
    folder = tmp_path / "imgs"
    _write_images(folder)
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    assert run_cli("check", folder, "--candidate", "reference", "--profile", "k3-small", "--out", tmp_path) == 2
    assert "broken.png" in capsys.readouterr().err


def test_findings_are_readable_images(tmp_path, capsys):
    run_cli("fuzz", "--candidate", f"{PLANTED}:chessboard_flipped", "--modes", "RGBA", "--examples", "100",
            "--seed", "3", "--max-side", "40", "--out", tmp_path, "--no-invariance")
    out = capsys.readouterr().out
    assert "pixel_mismatch" in out and "reproduce: kimi-oracle repro" in out
    [finding] = list((tmp_path / "findings").iterdir())
    with Image.open(finding / "input.png") as img:
        assert img.mode == "RGBA"
    with Image.open(finding / "diff.png") as diff:
        assert diff.width >= 150


def test_check_folder_scan_lists_what_it_skipped(tmp_path, capsys):
    import os

    folder = tmp_path / "imgs"
    _write_images(folder)
    (folder / "notes.txt").write_text("not an image")
    os.mkfifo(folder / "stream.png")  # an image suffix, but a FIFO: never opened
    code = run_cli("check", folder, "--candidate", "reference", "--profile", "k3-small", "--out", tmp_path / "o",
                   "--json", tmp_path / "check.json")
    assert code == 0
    err = capsys.readouterr().err
    assert f"skipped: {folder / 'notes.txt'}: .txt is not an image suffix" in err
    assert f"skipped: {folder / 'stream.png'}: not a regular file" in err
    summary = json.loads((tmp_path / "check.json").read_text())
    assert len(summary["skipped"]) == 2 and len(summary["images"]) >= 3 and summary["errors"] == []
