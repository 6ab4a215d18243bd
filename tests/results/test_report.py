"""Finding directories, atomic writes, JUnit XML and diff images."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.files import atomic_write_text
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.fuzzers.fuzzing import evaluate, finding_from
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.pipelines import reference
from kimi_oracle.results.report import (
    Finding,
    junit_cases_for,
    read_case,
    write_finding,
    write_junit,
)

CFG = PreprocessConfig.k3_small()


def _off_by_two(images, config):
    out = reference.preprocess(images, config)
    pv = out.pixel_values.clone()
    pv[-1, 1, 3, 4] += 4.0 / 255.0  # two levels (std 0.5)
    return PreprocessResult(pv, out.grid_thws)


def _finding(mode="CMYK", check_params=None):
    params = check_params or CaseParams(70, 50, mode, "opaque", "noise", seed=9)
    images = [make_image(params)]
    verdict = evaluate(_off_by_two, images, CFG)
    assert verdict.check == "pixel_mismatch"
    return finding_from(verdict, "off_by_two", CFG, images, params=[params.to_dict()], seed=5, example=3)


def test_finding_directory_contents(tmp_path):
    f = _finding("CMYK")
    path = write_finding(tmp_path, f)
    assert path == tmp_path / "findings" / f.id
    names = sorted(p.name for p in path.iterdir())
    assert names == ["case.json", "diff.png", "input.tiff", "report.md", "stats.json"]  # CMYK: not PNG
    case, directory = read_case(path)
    assert directory == path
    assert case["check"] == "pixel_mismatch" and case["seed"] == 5 and case["example"] == 3
    assert PreprocessConfig.from_hf_json(case["config"]) == CFG
    assert CaseParams.from_dict(case["images"][0]["params"]) == CaseParams(70, 50, "CMYK", "opaque", "noise", seed=9)
    for key in ("kimi-oracle", "Pillow", "torch", "triton", "numpy"):
        assert key in case["versions"]
    stats = json.loads((path / "stats.json").read_text())
    assert stats["stats"]["max_level_diff"] == pytest.approx(2.0)
    report = (path / "report.md").read_text()
    assert "kimi-oracle repro" in report and "max 2 levels" in report
    diff = Image.open(path / "diff.png")
    assert diff.mode == "RGB" and diff.width > 3 * 56
    # No temporary directories left behind.
    assert [p.name for p in (tmp_path / "findings").iterdir()] == [f.id]


def test_rgba_input_is_png_with_alpha(tmp_path):
    f = _finding(check_params=CaseParams(70, 50, "RGBA", "random", "noise", seed=1))
    path = write_finding(tmp_path, f)
    with Image.open(path / "input.png") as img:
        assert img.mode == "RGBA"


def test_existing_finding_is_never_overwritten(tmp_path):
    f = _finding()
    path = write_finding(tmp_path, f)
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    g = _finding()
    g.message = "something else"
    assert g.id == f.id
    assert write_finding(tmp_path, g) == path
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before


def test_failed_write_leaves_no_partial_finding(tmp_path, monkeypatch):
    f = _finding()

    def broken_save(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(Image.Image, "save", broken_save)
    with pytest.raises(OSError):
        write_finding(tmp_path, f)
    assert list((tmp_path / "findings").iterdir()) == []


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    atomic_write_text(target, "old")

    def fail(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_junit_xml(tmp_path):
    f = _finding()
    f.path = tmp_path / "x"
    cases = junit_cases_for([f], ["grid_mismatch", "pixel_mismatch"])
    out = write_junit(tmp_path / "j.xml", "suite", cases, time=1.5, properties={"seed": 1})
    root = ET.parse(out).getroot()
    suite = root.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    by_name = {c.get("name"): c for c in suite.findall("testcase")}
    assert by_name["grid_mismatch"].find("failure") is None
    failure = by_name["pixel_mismatch"].find("failure")
    assert "1 finding(s)" in failure.get("message") and "kimi-oracle repro" in failure.text


def test_crash_finding_report(tmp_path):
    def boom(images, config):
        raise ZeroDivisionError("tile size 0")

    img = make_image(CaseParams(3, 3))
    verdict = evaluate(boom, [img], CFG)
    f = finding_from(verdict, "boom", CFG, [img], params=[CaseParams(3, 3).to_dict()])
    path = write_finding(tmp_path, f)
    assert not (path / "diff.png").exists()
    report = (path / "report.md").read_text()
    assert "ZeroDivisionError: tile size 0" in report and "Traceback" in report


def test_finding_id_depends_on_what_was_run():
    a = _finding()
    b = _finding(check_params=CaseParams(70, 50, "CMYK", "opaque", "noise", seed=10))
    assert a.id != b.id and a.id.startswith("pixel_mismatch-")
    assert _finding().id == a.id  # the same run gives the same id (no clock, no randomness in it)


def _files_at_rename(monkeypatch) -> dict[str, dict[str, bytes]]:
    """Spy on the rename that publishes a finding: what its directory held at that moment."""
    seen: dict[str, dict[str, bytes]] = {}
    real = os.rename

    def spy(src, dst):
        if os.path.isdir(src):
            seen[os.path.basename(dst)] = {n: open(os.path.join(src, n), "rb").read() for n in os.listdir(src)}
        return real(src, dst)

    monkeypatch.setattr(os, "rename", spy)
    return seen


def test_extra_files_are_published_with_the_finding(tmp_path, monkeypatch):
    seen = _files_at_rename(monkeypatch)
    f = _finding()
    raw = b"\x00\x01fuzzer bytes\xff"
    path = write_finding(tmp_path, f, extra_files={"fuzz-input.bin": raw})
    assert seen[f.id]["fuzz-input.bin"] == raw  # there before the directory had its final name
    assert (path / "fuzz-input.bin").read_bytes() == raw
    assert {"case.json", "report.md", "stats.json"} <= set(seen[f.id])


@pytest.mark.parametrize("name", ["../escape.bin", "sub/x.bin", "case.json", "report.md", "input.png", ".hidden", ""])
def test_extra_files_may_not_clash_or_escape(tmp_path, name):
    with pytest.raises(ValueError):
        write_finding(tmp_path, _finding(), extra_files={name: b"x"})
    assert not (tmp_path / "escape.bin").exists()
    assert not (tmp_path / "findings").exists() or list((tmp_path / "findings").iterdir()) == []


def test_findings_without_images_are_named_by_their_raw_input():
    def harness_level(raw: bytes) -> Finding:
        return Finding(check="crash", message="the harness process died", candidate="reference", config=CFG,
                       raw_inputs=[raw], engine="atheris")

    a, b = harness_level(b"\x89PNG first input"), harness_level(b"\x89PNG other input")
    assert a.id != b.id
    assert a.id == harness_level(b"\x89PNG first input").id
    assert a.id.startswith("crash-")
