"""The pytest plugin in a kernel project's suite, and the eager candidate's real divergences."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kimi_oracle.core.config import PreprocessConfig

PLANTED = str(Path(__file__).resolve().parents[1] / "mutants" / "planted.py")


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_own.py").write_text("def test_own():\n    assert True\n")
    # -p loads the plugin whether or not the package was reinstalled with its entry point.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "kimi_oracle.cli.pytest_plugin", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-q", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )


def test_plugin_reports_one_item_per_check(tmp_path):
    proc = _pytest(tmp_path, "--kimi-candidate", f"{PLANTED}:grid_int32", "--kimi-examples", "20",
                   "--kimi-seed", "1", "--kimi-out", str(tmp_path / "out"))
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    # the project's own test + 7 passing checks (timeout too: the candidate runs in its own process;
    # accepts_invalid)
    assert "1 failed, 8 passed" in out
    assert "kimi-oracle::shape_dtype" in out and "grid_thws dtype int32 != int64" in out
    assert "kimi-oracle repro" in out
    assert any((tmp_path / "out" / "findings").iterdir())


def test_plugin_bad_spec_is_a_usage_error(tmp_path):
    proc = _pytest(tmp_path, "--kimi-candidate", "nope")
    assert proc.returncode == 4  # pytest's usage error
    assert "kimi-oracle: bad candidate spec" in proc.stderr


def test_plugin_is_inert_without_a_candidate(tmp_path):
    proc = _pytest(tmp_path)
    assert proc.returncode == 0 and "1 passed" in proc.stdout


def _eager():
    from kimi_oracle.oracle.candidates import load_candidate

    return load_candidate("eager")  # part of the package: a failure to load it is a failure


def test_eager_divergences_show_up_as_findings(tmp_path):
    from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
    from kimi_oracle.results.report import finding_lines

    eager = _eager()
    # levels:12 hides the serving engine's resampling noise (a few levels) so that the
    # structural divergences stand out: straight alpha, palettes resampled bicubic, CMYK.
    run = fuzz(eager, PreprocessConfig.k3(), FuzzOptions(examples=120, seed=1, max_side=48, tolerance="levels:12",
                                                         modes=("RGBA", "P", "CMYK"), invariance=False),
               out_dir=tmp_path)
    groups = {f.extra["group"] for f in run.findings}
    assert {"pixel_mismatch[CMYK]<levels>"} <= groups
    assert any(g.startswith("pixel_mismatch[P") for g in groups)
    assert any(g.startswith("pixel_mismatch[RGBA") for g in groups)
    for f in run.findings:
        assert (f.path / "report.md").is_file() and (f.path / "diff.png").is_file()
        text = "\n".join(finding_lines(f))
        assert "levels" in text and "worst: image " in text  # the worst image of a batch, named


def test_gpu_candidate_tiny_case_under_the_interpreter(tmp_path):
    # One resampled RGBA image through the real GPU pipeline (Triton interpreter on CPU), via
    # the CLI in a subprocess: TRITON_INTERPRET must be set before the kernels are imported.
    import os

    env = dict(os.environ)
    if env.get("KIMI_GPU_TESTS_ON_CUDA") != "1":
        env["TRITON_INTERPRET"] = "1"
    script = (
        "import sys\n"
        "from kimi_oracle.oracle.candidates import load_candidate\n"
        "from kimi_oracle.core.errors import CandidateError\n"
        "from kimi_oracle.core.config import PreprocessConfig\n"
        "from kimi_oracle.fuzzers.fuzzing import evaluate\n"
        "from kimi_oracle.inputs.generators import CaseParams, make_image\n"
        "try:\n"
        "    gpu = load_candidate('gpu')\n"
        "except CandidateError as exc:\n"
        "    print('CANNOT LOAD', exc); sys.exit(0)\n"
        "img = make_image(CaseParams(70, 45, 'RGBA', 'checker', 'noise', seed=1, square=8))\n"
        "v = evaluate(gpu, [img], PreprocessConfig.k3_small(), invariance=False)\n"
        "print('VERDICT', v.check, v.message)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    # The GPU pipeline and triton are part of the installation: not loading is a failure too.
    assert "VERDICT None all checks passed" in proc.stdout, proc.stdout + proc.stderr[-2000:]
