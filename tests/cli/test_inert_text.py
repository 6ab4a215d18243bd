"""Text from candidates is inert in every output: markup is not interpreted, brackets survive,
undecodable characters are escaped (never fatal), and JUnit XML stays valid XML."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PIL import Image

from cli_run import exit_code_of as run_cli

NASTY = "[/x] [enforce fail at alloc_cpu.cpp:72] [bold]not bold[/bold] \x01\x1b[31m \udcff end"



@pytest.fixture
def candidate(tmp_path) -> str:
    path = tmp_path / "nasty.py"
    path.write_text(textwrap.dedent(f"""
        def f(images, config):
            raise RuntimeError({NASTY!r})
    """))
    return f"{path}:f"


def _check_outputs(tmp_path: Path, out: str) -> None:
    assert "[enforce fail at alloc_cpu.cpp:72]" in out and "[/x]" in out and "[bold]not bold[/bold]" in out
    assert "\\udcff" in out  # escaped, not dropped and not fatal
    root = ET.parse(tmp_path / "j.xml").getroot()  # valid XML despite \x01 and \x1b
    failures = root.findall(".//failure")
    assert failures and all("[enforce fail at alloc_cpu.cpp:72]" in f.get("message") for f in failures)
    summary = json.loads((tmp_path / "run.json").read_text())
    [finding] = summary["findings"]
    assert finding["check"] == "crash" and "[enforce fail at alloc_cpu.cpp:72]" in finding["message"]
    folder = Path(finding["path"])
    assert "[enforce fail" in (folder / "report.md").read_text(encoding="utf-8")
    assert json.loads((folder / "case.json").read_text())["check"] == "crash"


def test_fuzz_keeps_candidate_text_literal(tmp_path, capsys, candidate):
    code = run_cli("fuzz", "--candidate", candidate, "--examples", "3", "--seed", "1", "--out", tmp_path / "o",
                   "--json", tmp_path / "run.json", "--junit", tmp_path / "j.xml", "--modes", "RGB")
    out = capsys.readouterr()
    assert code == 1, out.err
    _check_outputs(tmp_path, out.out)


def test_check_keeps_candidate_text_literal(tmp_path, capsys, candidate):
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (20, 10), (1, 2, 3)).save(folder / "[red]x[bold].png")
    code = run_cli("check", folder, "--candidate", candidate, "--out", tmp_path / "o",
                   "--json", tmp_path / "run.json", "--junit", tmp_path / "j.xml", "--no-invariance")
    out = capsys.readouterr()
    assert code == 1, out.err
    assert "[red]x[bold].png" in out.out
    _check_outputs(tmp_path, out.out)
