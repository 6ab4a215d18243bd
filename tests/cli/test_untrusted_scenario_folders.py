"""`repro` of a scenario folder gets every check a case folder gets, and a relative spec replays.

A scenario folder is untrusted input: an engine file inside it is never run, its files are read
through `core.files` (regular files only, capped), its counts and nesting are bounded; each bad
folder is one line and exit 2. A finding made with a relative spec records it absolute and
replays from anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from cli_run import run_cli


@pytest.fixture(scope="module")
def scenario_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("scenario")
    with pytest.raises(SystemExit) as exc:
        from kimi_oracle.cli import main

        main(["fuzz", "--engine", "sglang-0.5.23", "--mixed-configs", "--examples", "30", "--seed", "2",
              "--no-shrink", "--out", str(out)])
    assert exc.value.code == 1
    [folder] = (out / "findings").iterdir()
    return folder


def _copy(folder: Path, tmp_path: Path) -> tuple[Path, dict]:
    dest = tmp_path / folder.name
    shutil.copytree(folder, dest)
    return dest, json.loads((dest / "scenario.json").read_text())


def _repro(capsys, folder):
    code, out, err = run_cli(capsys, "repro", folder)
    return code, out + err


def test_an_engine_file_inside_the_folder_is_never_run(scenario_folder, tmp_path, capsys):
    folder, doc = _copy(scenario_folder, tmp_path)
    marker = tmp_path / "ran"
    (folder / "payload.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef engine(config, tokenizer):\n    pass\n")
    doc["engine"] = "payload.py:engine"
    (folder / "scenario.json").write_text(json.dumps(doc))
    for spec in ("payload.py:engine", str(folder / "payload.py") + ":engine"):
        doc["engine"] = spec
        (folder / "scenario.json").write_text(json.dumps(doc))
        cwd = os.getcwd()
        os.chdir(folder)  # (a relative spec resolves against where the command runs: here, inside)
        try:
            code, text = _repro(capsys, folder)
        finally:
            os.chdir(cwd)
        assert code == 2 and "inside the finding folder: refused" in text, text
    assert not marker.exists()


def test_links_fifos_and_huge_or_deep_documents_are_refused(scenario_folder, tmp_path, capsys):
    cases = []
    folder, doc = _copy(scenario_folder, tmp_path / "zero")
    first = folder / doc["image_files"][0]["file"]
    first.unlink()
    first.symlink_to("/dev/zero")
    cases.append((folder, "not a regular file"))
    folder, doc = _copy(scenario_folder, tmp_path / "fifo")
    first = folder / doc["image_files"][0]["file"]
    first.unlink()
    os.mkfifo(first)
    cases.append((folder, "not a regular file"))
    folder, doc = _copy(scenario_folder, tmp_path / "sparse")
    with open(folder / "scenario.json", "r+b") as fh:
        fh.truncate(600 << 20)  # sparse: nothing written, 600 MiB long
    cases.append((folder, "exceeds the byte cap"))
    folder, doc = _copy(scenario_folder, tmp_path / "many")
    req = doc["scenario"]["requests"][0]
    doc["scenario"]["requests"] = [req] * 20000
    (folder / "scenario.json").write_text(json.dumps(doc))
    cases.append((folder, "20000 requests, more than the 256"))
    folder, doc = _copy(scenario_folder, tmp_path / "sparse30")
    with open(folder / "scenario.json", "r+b") as fh:
        fh.truncate(30 << 30)  # sparse: 30 GiB long
    cases.append((folder, "exceeds the byte cap"))
    folder, doc = _copy(scenario_folder, tmp_path / "items")  # 2 requests of 600 images: 1200 items
    doc["scenario"]["requests"] = [dict(req, texts=[""] * 601, images=[0] * 600, paths=["deferred"] * 600)] * 2
    (folder / "scenario.json").write_text(json.dumps(doc))
    cases.append((folder, "1200 images over all requests, more than the 1024"))
    folder, doc = _copy(scenario_folder, tmp_path / "text")
    doc["scenario"]["requests"][0]["texts"][0] = "x" * 100_000
    (folder / "scenario.json").write_text(json.dumps(doc))
    cases.append((folder, "request 0 has 100"))
    folder, doc = _copy(scenario_folder, tmp_path / "deep")
    (folder / "scenario.json").write_text("[" * 100000 + "]" * 100000)
    cases.append((folder, "nest"))
    for folder, expected in cases:
        code, text = _repro(capsys, folder)
        assert code == 2 and expected in text, (folder, text)
        assert "internal error" not in text and "Traceback" not in text


def test_a_relative_spec_replays_from_anywhere(tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "mykernel.py").write_text(textwrap.dedent("""
        from kimi_oracle.pipelines.reference import preprocess as reference
        from kimi_oracle.core.result import PreprocessResult

        def plus_one(images, config):
            out = reference(images, config)
            return PreprocessResult(out.pixel_values + 1.0, out.grid_thws)
    """))
    monkeypatch.chdir(work)
    code, out, err = run_cli(capsys, "fuzz", "--candidate", "mykernel.py:plus_one", "--examples", "3", "--seed", "1",
                             "--no-shrink", "--out", "out")
    assert code == 1, out + err
    folder = sorted((work / "out" / "findings").iterdir())[0]
    case = json.loads((folder / "case.json").read_text())
    assert case["candidate"] == f"{work / 'mykernel.py'}:plus_one"  # recorded absolute
    code, out, err = run_cli(capsys, "repro", folder)
    assert code == 1, out + err  # still fails: replayed, not refused
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "repro", folder)
    assert code == 1, out + err
    # A folder of an older run, the spec recorded relative: it resolves against the current
    # directory (where such a run was made), not against the folder.
    case["candidate"] = "mykernel.py:plus_one"
    (folder / "case.json").write_text(json.dumps(case))
    monkeypatch.chdir(work)
    code, out, err = run_cli(capsys, "repro", folder)
    assert code == 1 and "refused" not in out + err, out + err
