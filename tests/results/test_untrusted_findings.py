"""A finding folder downloaded from CI is untrusted input: `repro` validates case.json, reads only
plain file names inside the folder with their recorded SHA-256, caps what it allocates, never
imports a candidate from inside the folder, and runs the candidate in a separate process so that
its death or hang is a verdict, never a crash of `repro` itself or an exit 0."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from cli_run import exit_code_of as run_cli
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.oracle.candidates import load_candidate

PLANTED = str(Path(__file__).resolve().parents[1] / "mutants" / "planted.py")



@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """One real pixel finding of a planted mutant (straight alpha), written by the fuzzer."""
    out = tmp_path_factory.mktemp("finding")
    run = fuzz(load_candidate(f"{PLANTED}:straight_alpha"), PreprocessConfig.k3_small(),
               FuzzOptions(examples=60, seed=5, invariance=False, modes=("RGBA",), max_images=1), out_dir=out)
    assert run.findings, "the planted mutant must be found to build the fixture"
    return run.findings[0].path


@pytest.fixture
def finding(pristine, tmp_path) -> Path:
    copy = tmp_path / "finding"
    shutil.copytree(pristine, copy)
    return copy


def _edit(folder: Path, change) -> None:
    case = json.loads((folder / "case.json").read_text())
    change(case)
    (folder / "case.json").write_text(json.dumps(case))


def _repro(folder: Path, capsys, *args) -> tuple[int, str, str]:
    code = run_cli("repro", folder, *args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_untouched_finding_still_fails(finding, capsys):
    code, out, _ = _repro(finding, capsys)
    assert code == 1 and "still fails" in out
    assert out.splitlines()[0] == f"candidate: {PLANTED}:straight_alpha (recorded in case.json)"


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "..", "sub/input.png", ".hidden"])
def test_file_names_outside_the_folder_are_refused(finding, capsys, name):
    _edit(finding, lambda c: c["images"][0].update(file=name))
    code, _, err = _repro(finding, capsys)
    assert code == 2 and "images[0].file" in err and "plain file name" in err and len(err.splitlines()) == 1


def test_a_symlink_pointing_outside_is_refused(finding, capsys, tmp_path):
    outside = tmp_path / "other.png"
    shutil.copy(finding / "input.png", outside)
    (finding / "input.png").unlink()
    (finding / "input.png").symlink_to(outside)
    code, _, err = _repro(finding, capsys)
    assert code == 2 and "points outside the finding folder" in err


def test_a_replaced_input_fails_its_digest(finding, capsys):
    from PIL import Image

    Image.new("RGBA", (9, 9), (1, 2, 3, 4)).save(finding / "input.png")
    code, _, err = _repro(finding, capsys)
    assert code == 2 and "images[0].sha256" in err and "does not match" in err


def test_huge_generator_parameters_are_refused_unallocated(finding, capsys):
    def huge(case):
        case["images"][0]["params"].update(width=60000, height=60000)
        case["images"][0].pop("file")

    _edit(finding, huge)
    code, _, err = _repro(finding, capsys)
    assert code == 2 and "images[0].params" in err and "over the pixel cap" in err


def test_a_huge_raw_container_is_refused_unallocated(finding, capsys):
    import hashlib

    header = json.dumps({"mode": "RGBA", "size": [60000, 60000], "info": {}}).encode()
    raw = b"KIMIRAW1" + len(header).to_bytes(4, "little") + header + b"\0" * 16
    (finding / "input.kimiraw").write_bytes(raw)
    _edit(finding, lambda c: c["images"][0].update(file="input.kimiraw", sha256=hashlib.sha256(raw).hexdigest()))
    code, _, err = _repro(finding, capsys)
    assert code == 2 and "over the pixel cap" in err


@pytest.mark.parametrize("field,value,named", [
    ("config", None, "'config'"),
    ("config", {"patch_size": "x"}, "'config'"),
    ("images", "input.png", "'images'"),
    ("check", "made_up", "'check'"),
    ("tolerance", "levels:-3", "'tolerance'"),
])
def test_malformed_fields_are_named(finding, capsys, field, value, named):
    _edit(finding, lambda c: c.update({field: value}))
    code, _, err = _repro(finding, capsys)
    assert code == 2 and named in err and "internal error" not in err and len(err.splitlines()) == 1


def test_a_candidate_inside_the_folder_is_never_imported(finding, capsys, tmp_path):
    marker = tmp_path / "imported"
    (finding / "evil.py").write_text(textwrap.dedent(f"""
        open({str(marker)!r}, "w").write("ran")
        def f(images, config):
            raise SystemExit(0)
    """))
    for spec in (str(finding / "evil.py") + ":f", "evil.py:f", "evil.py", str(finding / "evil.py")):
        _edit(finding, lambda c, spec=spec: c.update(candidate=spec))
        code, _, err = _repro(finding, capsys)
        assert code == 2 and "inside the finding folder" in err
    assert not marker.exists()
    # --candidate overrides the recorded one (the user chose it).
    code, out, _ = _repro(finding, capsys, "--candidate", "reference")
    assert code == 0 and "fixed" in out


HOSTILE = textwrap.dedent("""
    import os, signal, sys, time
    def exits0(images, config):
        sys.exit(0)
    def os_exit0(images, config):
        os._exit(0)
    def segfault(images, config):
        os.kill(os.getpid(), signal.SIGSEGV)
    def hangs(images, config):
        time.sleep(3600)
    class Custom(BaseException):
        pass
    def base_exception(images, config):
        raise Custom("[/x] not markup")
""")


@pytest.mark.parametrize("fn,words", [
    ("exits0", "SystemExit"), ("os_exit0", "exit status 0"), ("segfault", "SIGSEGV"), ("hangs", "timeout"),
    ("base_exception", "Custom"),
])
def test_a_dying_or_hanging_candidate_never_reads_fixed(finding, capsys, tmp_path, fn, words):
    cand = tmp_path / "hostile.py"
    cand.write_text(HOSTILE)
    code, out, err = _repro(finding, capsys, "--candidate", f"{cand}:{fn}", "--case-timeout", "2s")
    assert code == 1, out + err
    assert "fixed" not in out and words.lower() in (out + err).lower()
