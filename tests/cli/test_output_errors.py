"""Where output cannot go, the command says so in one line naming the place, exit 2: `--out` under
a file, before any work; a file-size limit met while writing a finding, naming the finding."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from cli_run import run_cli


@pytest.mark.parametrize("argv", [
    ["fuzz", "--candidate", "reference", "--examples", "2"],
    ["fuzz", "--engine", "sglang-0.5.23", "--examples", "2"],
    ["nightly", "--engines", "hypothesis", "--max-examples", "2", "--budget", "30s"],
    ["gate", "--engine", "sglang-0.5.23", "--engine-scenarios", "2"],
    ["golden", "check", "--candidate", "reference"],
    ["merge", "SHARD"],
    ["gpu", "build"],
])
def test_out_under_a_file_is_refused_before_any_work(tmp_path, capsys, argv):
    afile = tmp_path / "afile"
    afile.write_text("x")
    argv = [str(tmp_path) if a == "SHARD" else a for a in argv]
    code, out, err = run_cli(capsys, *argv, "--out", afile / "x")
    assert code == 2
    assert "is a file, not a directory" in err and "internal error" not in err
    assert afile.read_text() == "x"


@pytest.mark.parametrize("option", ["--json", "--junit"])
def test_a_report_under_a_file_is_refused_before_any_work(tmp_path, capsys, option):
    afile = tmp_path / "afile"
    afile.write_text("x")
    image = tmp_path / "img.png"
    image.write_bytes(b"not read: the check comes first")
    code, out, err = run_cli(capsys, "check", image, "--candidate", "reference", option, afile / "x")
    assert code == 2 and "row(s)" not in out  # before any image is checked
    assert f"{option}: cannot be written: {afile} is a file, not a directory" in err and "internal error" not in err
    assert afile.read_text() == "x"


def test_a_file_size_limit_names_the_file(tmp_path):
    def limit():  # 8 KiB: the first finding's folder (its inputs, case.json, report.md) does not fit
        resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 10, 8 << 10))

    proc = subprocess.run([sys.executable, "-m", "kimi_oracle", "fuzz", "--candidate", "eager", "--examples", "3", "--no-shrink",
                           "--seed", "1", "--out", str(tmp_path / "out")], preexec_fn=limit, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "internal error" not in proc.stderr
    assert f"cannot write {tmp_path / 'out' / 'findings'}" in proc.stderr and "file-size limit" in proc.stderr


@pytest.mark.parametrize("error, expected", [
    (OSError(27, "File too large"), "over the file-size limit (ulimit -f)"),  # a write that names no file
    (OSError(27, "File too large", "/x/hypothesis-db/ab"), "/x/hypothesis-db/ab: over the file-size limit"),
    (FileNotFoundError(2, "No usable temporary directory found in ['/tmp']"), "none can be written"),
])
def test_an_os_error_no_writer_named_is_one_clear_line(tmp_path, capsys, monkeypatch, error, expected):
    # What reaches the top from a library's write (hypothesis' database, tempfile under 'ulimit -f 0').
    def fail(*args):
        raise error

    monkeypatch.setattr("kimi_oracle.cli.check.check_outputs", fail)
    code, out, err = run_cli(capsys, "check", tmp_path, "--candidate", "reference")
    assert code == 2 and expected in err and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1
