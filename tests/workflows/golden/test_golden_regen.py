"""`golden regen`: nothing but .obtained files without --accept; atomic, guarded acceptance."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from golden_testlib import edit_entry, entries, golden_copy, obtained_of, snapshot  # noqa: F401  (fixture)

from kimi_oracle import cli
from kimi_oracle.core import files
from kimi_oracle.workflows import golden

GOLDEN_FILES = [f"{k}/{p}.jsonl" for k in ("grids", "pixels") for p in ("k3", "k25", "k3-small")]


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def _break(golden_dir: Path, n_grids: int = 1, pixel: bool = True) -> dict[str, bytes]:
    """Edit some entries; return the committed bytes of every golden file."""
    pristine = {name: (golden_dir / name).read_bytes() for name in GOLDEN_FILES}
    sizes = ["640x480", "1920x1080", "4032x3024", "7680x4320", "1x1"][:n_grids]
    for size in sizes:
        edit_entry(golden_dir / "grids" / "k25.jsonl", "grids", size, lambda e: e.update(num_tokens=e["num_tokens"] + 1))
    if pixel:
        edit_entry(golden_dir / "pixels" / "k3.jsonl", "pixels", "P/key", lambda e: e.update(sha256="0" * 64))
    return pristine


def test_regen_on_matching_files_changes_nothing(golden_copy, capsys):
    before = snapshot(golden_copy)
    code, out, _ = run_cli(["golden", "regen", "--golden-dir", str(golden_copy)], capsys)
    assert code == 0 and "all 8 files match" in out
    assert snapshot(golden_copy) == before


def test_regen_without_accept_writes_only_obtained_files(golden_copy, capsys):
    _break(golden_copy)
    before = snapshot(golden_copy)
    code, out, _ = run_cli(["golden", "regen", "--golden-dir", str(golden_copy)], capsys)
    assert code == 1
    assert snapshot(golden_copy) == before, "regen without --accept wrote into the golden directory"
    out_dir = golden.default_out_dir()
    after = snapshot(out_dir)
    assert set(after) == {"grids/k25.jsonl.obtained", "pixels/k3.jsonl.obtained", "golden-report.json",
                          "golden-report.md"}
    assert "~ 640x480 [real_world]" in out and "~ P/key (" in out
    # A second run leaves the same state (the .obtained files are replaced, not accumulated).
    run_cli(["golden", "regen", "--golden-dir", str(golden_copy)], capsys)
    assert set(snapshot(out_dir)) == set(after) and snapshot(golden_copy) == before


def test_accept_restores_and_removes_obtained(golden_copy, capsys):
    pristine = _break(golden_copy)
    code, out, _ = run_cli(["golden", "regen", "--golden-dir", str(golden_copy), "--accept"], capsys)
    assert code == 0, out
    assert "ACCEPTED" in out and "accepted: 2 golden files replaced (2 entries)" in out
    # Same libraries as when the goldens were committed: byte-identical files again.
    for name, data in pristine.items():
        assert entries(golden_copy / name) == entries_from_bytes(data), name
    assert not list(golden_copy.rglob("*.obtained")) and not list(golden_copy.rglob(".*"))
    assert not list(golden.default_out_dir().rglob("*.obtained")), "accepted: no .obtained file is left"
    assert golden.check(golden_copy, write_obtained=False).ok


def entries_from_bytes(data: bytes) -> list[dict]:
    import json

    return [json.loads(line) for line in data.decode().split("\n")[1:-1]]


def test_max_changes_guard(golden_copy, capsys):
    _break(golden_copy, n_grids=3)  # 4 changed entries
    before = {name: (golden_copy / name).read_bytes() for name in GOLDEN_FILES}
    code, out, _ = run_cli(["golden", "regen", "--golden-dir", str(golden_copy), "--accept", "--max-changes", "3"], capsys)
    assert code == 1 and "refused: 4 changed entries is more than --max-changes 3" in out
    assert {name: (golden_copy / name).read_bytes() for name in GOLDEN_FILES} == before
    code, out, _ = run_cli(["golden", "regen", "--golden-dir", str(golden_copy), "--accept", "--max-changes", "4"], capsys)
    assert code == 0 and golden.check(golden_copy, write_obtained=False).ok


def test_force_overrides_the_guard(golden_copy, capsys):
    _break(golden_copy, n_grids=5)
    code, out, _ = run_cli(["golden", "regen", "--golden-dir", str(golden_copy), "--accept", "--max-changes", "0",
                            "--force"], capsys)
    assert code == 0 and golden.check(golden_copy, write_obtained=False).ok


def test_unreadable_golden_file_needs_force(golden_copy, capsys):
    path = golden_copy / "grids" / "k3.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])  # truncated mid-line: no entry can be compared
    code, out, _ = run_cli(["golden", "regen", "--golden-dir", str(golden_copy), "--accept",
                            "--max-changes", "1000000"], capsys)
    assert code == 1 and "refused:" in out and "--force" in out
    assert path.read_bytes() == data[: len(data) // 3]
    code, out, _ = run_cli(["golden", "regen", "--golden-dir", str(golden_copy), "--accept", "--force"], capsys)
    assert code == 0 and path.read_bytes() == data


def test_default_guard_refuses_a_full_regeneration(tmp_path, capsys):
    code, out, _ = run_cli(["golden", "regen", "--golden-dir", str(tmp_path / "fresh"), "--accept",
                            "--kind", "pixels", "--profile", "k3", "--out", str(tmp_path / "out")], capsys)
    assert code == 1 and "refused: 47 changed entries is more than --max-changes 20" in out
    assert not (tmp_path / "fresh").exists()
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == [
        "golden-report.json", "golden-report.md", "k3.jsonl.obtained", "pixels"]


def test_out_inside_the_golden_directory_is_refused(golden_copy, capsys):
    code, _, err = run_cli(["golden", "check", "--golden-dir", str(golden_copy), "--out",
                            str(golden_copy / "sub")], capsys)
    assert code == 2 and "inside the golden directory" in err


def _failing_write(fail_on: str):
    """A `_stage` that dies half-way through writing the temporary file of `fail_on`."""
    real_stage = files._stage
    real_write = files._write_chunks

    def stage(path, text):
        if Path(path).name != fail_on:
            return real_stage(path, text)

        def half(fh, data):
            real_write(fh, data[: len(data) // 2])
            fh.flush()
            raise KeyboardInterrupt("simulated interruption mid-write")

        files._write_chunks = half
        try:
            return real_stage(path, text)
        finally:
            files._write_chunks = real_write

    return stage


def test_interrupted_accept_leaves_every_golden_intact(golden_copy, monkeypatch):
    _break(golden_copy)
    before = {name: (golden_copy / name).read_bytes() for name in GOLDEN_FILES}
    # The second of the two files to replace dies mid-write: since every file is staged before
    # any is renamed, neither golden changes, and no temporary file is left behind.
    monkeypatch.setattr(files, "_stage", _failing_write("k3.jsonl"))
    with pytest.raises(KeyboardInterrupt):
        golden.regen(golden_copy, accept=True)
    assert {name: (golden_copy / name).read_bytes() for name in GOLDEN_FILES} == before
    assert not [p for p in golden_copy.rglob("*") if p.name.endswith(".tmp")]


def test_failed_rename_leaves_each_file_whole(golden_copy, monkeypatch):
    _break(golden_copy)
    before = {name: (golden_copy / name).read_bytes() for name in GOLDEN_FILES}
    real_replace = os.replace
    calls = []

    def replace(src, dst):
        calls.append(dst)
        if str(dst).endswith("pixels/k3.jsonl"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError):
        golden.regen(golden_copy, accept=True)
    monkeypatch.setattr(os, "replace", real_replace)
    # grids/k25.jsonl was renamed into place whole; pixels/k3.jsonl is the old file, whole.
    assert (golden_copy / "pixels/k3.jsonl").read_bytes() == before["pixels/k3.jsonl"]
    for name in GOLDEN_FILES:
        golden.load(golden_copy / name, *name[:-6].split("/"))  # parses: never truncated
    assert golden.check(golden_copy, kinds=["grids"], profiles=["k25"], write_obtained=False).ok
    assert not [p for p in golden_copy.rglob("*") if p.name.endswith(".tmp")]


def test_killed_accept_never_truncates(golden_copy):
    """SIGKILL in the middle of writing a golden (no cleanup runs at all)."""
    _break(golden_copy)
    before = {name: (golden_copy / name).read_bytes() for name in GOLDEN_FILES}
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from kimi_oracle.workflows import golden
        from kimi_oracle.core import files
        real_stage, real_write = files._stage, files._write_chunks
        def stage(path, text):
            if Path(path).name == "k25.jsonl":
                def half(fh, data):
                    real_write(fh, data[: len(data) // 2]); fh.flush(); os.fsync(fh.fileno())
                    os.kill(os.getpid(), signal.SIGKILL)
                files._write_chunks = half
            return real_stage(path, text)
        files._stage = stage
        golden.regen({str(golden_copy)!r}, accept=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert {name: (golden_copy / name).read_bytes() for name in GOLDEN_FILES} == before
    leftovers = [p for p in golden_copy.rglob("*") if p.name.endswith(".tmp")]
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".k25.jsonl.")
    # The next regeneration clears the leftover and can accept normally.
    report = golden.regen(golden_copy, accept=True)
    assert all(f.ok or f.accepted for f in report.files)
    assert not [p for p in golden_copy.rglob("*") if p.name.endswith(".tmp")]
    assert golden.check(golden_copy, write_obtained=False).ok


def test_atomic_write_keeps_the_file_mode(tmp_path):
    target = tmp_path / "x.jsonl"
    target.write_text("old\n")
    target.chmod(0o640)
    files.atomic_write_text(target, "new\n")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["x.jsonl"]
