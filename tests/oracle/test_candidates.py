"""Candidate specs: built-ins, module and file specs, and clear errors for bad ones."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.fuzzers.fuzzing import evaluate
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.candidates import CandidateCrash, as_result, load_candidate
from kimi_oracle.pipelines import reference

CFG = PreprocessConfig.k3_small()
IMG = make_image(CaseParams(40, 30, "RGBA", "random", "noise", seed=3))


def test_reference_builtin_and_module_spec():
    for spec in ("reference", "kimi_oracle.pipelines.reference:preprocess"):
        cand = load_candidate(spec)
        out = cand([IMG], CFG)
        assert torch.equal(out.pixel_values, reference.preprocess([IMG], CFG).pixel_values)


@pytest.mark.parametrize("name, module", [("eager", "kimi_oracle.pipelines.eager"), ("gpu", "kimi_oracle.pipelines.gpu")])
def test_unavailable_builtin_is_a_clear_candidate_error(monkeypatch, name, module):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(CandidateError, match=f"built-in candidate '{name}' is not available"):
        load_candidate(name)


def _write(tmp_path, body, name="cand.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_file_spec_with_sibling_import(tmp_path):
    _write(tmp_path, "FACTOR = 1\n", name="helper_mod_for_kimi.py")
    path = _write(tmp_path, """
        from helper_mod_for_kimi import FACTOR
        from kimi_oracle.pipelines import reference
        def run(images, config):
            r = reference.preprocess(images, config)
            return r.pixel_values.numpy() * FACTOR, r.grid_thws.numpy()
    """)
    cand = load_candidate(f"{path}:run")
    assert evaluate(cand, [IMG], CFG).ok  # NumPy arrays are accepted


@pytest.mark.parametrize("spec, message", [
    ("", "empty candidate spec"),
    ("nope", "bad candidate spec 'nope': not a built-in"),
    (":f", "bad candidate spec ':f'"),
    ("not a module:f", "bad candidate spec"),
    ("kimi_oracle.core.errors", "module kimi_oracle.core.errors has no preprocess function"),
    ("no_such_module_kimi:f", "no module named 'no_such_module_kimi'"),
    ("kimi_oracle.pipelines.reference:nothing_here", "has no attribute 'nothing_here'"),
    ("kimi_oracle.pipelines.reference:PATTERN_VALUES", "is not callable"),
    ("/no/such/file.py:f", "no such file"),
])
def test_bad_specs(spec, message):
    with pytest.raises(CandidateError, match=message):
        load_candidate(spec)


def test_import_error_inside_the_candidate_file(tmp_path):
    path = _write(tmp_path, "import no_such_dependency_kimi\ndef f(images, config): pass\n")
    with pytest.raises(CandidateError, match="importing .* failed: ModuleNotFoundError"):
        load_candidate(f"{path}:f")


@pytest.mark.parametrize("value, message", [
    (None, "returned None"),
    ((1, 2, 3), "a tuple of 3 items"),
    (("a", "b"), "pixel_values is a builtins.str"),
    ((np.zeros(3, dtype=object), np.zeros((1, 3))), "object array"),
])
def test_wrong_return_types(value, message):
    with pytest.raises(CandidateError, match=message):
        as_result(value, "x")


def test_candidate_exception_is_a_crash_not_a_harness_error():
    def boom(images, config):
        raise RuntimeError("kernel launch failed")

    verdict = evaluate(boom, [IMG], CFG)
    assert verdict.check == "crash"
    assert "RuntimeError: kernel launch failed" in verdict.message
    assert "kernel launch failed" in verdict.stats["traceback"]
    with pytest.raises(CandidateCrash):
        load_candidate("reference").__class__("boom", boom)([IMG], CFG)


def test_candidate_that_mutates_its_inputs_does_not_corrupt_the_reference():
    def vandal(images, config):
        out = reference.preprocess(images, config)
        for img in images:
            img.paste(0, (0, 0, img.width, img.height))
            img.info.pop("transparency", None)
        return out

    keyed = make_image(CaseParams(40, 30, "P", "key", "noise", seed=1))
    assert evaluate(vandal, [IMG, keyed], CFG).ok


# ---------------------------------------------------------------------------------------------
# --tolerance bf16 for float32 candidates


def test_bf16_tolerance_casts_both_sides():
    from kimi_oracle.oracle.checks import compare

    expected = reference.preprocess([IMG], CFG)
    bf16 = expected.pixel_values.to(torch.bfloat16)
    # A float32 value one float32 ulp above a bfloat16 value rounds back to it (far from a tie):
    # the same bfloat16 value as the reference, though neither float32 value is equal.
    near = torch.nextafter(bf16.float(), torch.tensor(float("inf")))
    assert compare(expected, (near, expected.grid_thws), CFG, "bf16").ok
    assert compare(expected, (near, expected.grid_thws), CFG, "exact").check == "pixel_mismatch"
    # One bfloat16 step away is a difference under bf16 too.
    step = (bf16.view(torch.int16) + 1).view(torch.bfloat16).float()
    assert compare(expected, (step, expected.grid_thws), CFG, "bf16").check == "pixel_mismatch"


# ---------------------------------------------------------------------------------------------
# --interpret: TRITON_INTERPRET for the candidates a command starts


def test_interpret_fallback_without_cuda_is_announced_once(monkeypatch, capsys):
    from kimi_oracle.cli import common

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(common, "_INTERPRET_ANNOUNCED", False)
    monkeypatch.setattr(common, "cuda_visible", lambda: False)
    assert common.setup_interpret(None) is True and common.setup_interpret(None) is True
    assert capsys.readouterr().err.count("TRITON_INTERPRET=1") == 1
    import os

    assert os.environ["TRITON_INTERPRET"] == "1"
    assert common.setup_interpret(False) is False and "TRITON_INTERPRET" not in os.environ
    monkeypatch.setattr(common, "cuda_visible", lambda: True)
    assert common.setup_interpret(None) is False and "TRITON_INTERPRET" not in os.environ
    assert common.setup_interpret(True) is True and os.environ["TRITON_INTERPRET"] == "1"
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # an explicit setting is kept
    assert common.setup_interpret(None) is False and os.environ["TRITON_INTERPRET"] == "0"


def test_interpret_option_only_where_candidates_run():
    from click.testing import CliRunner

    from kimi_oracle.cli import cli

    runner = CliRunner()
    for command in (["fuzz"], ["check"], ["repro"], ["golden", "check"], ["nightly"]):
        assert "--interpret" in runner.invoke(cli, command + ["--help"]).output, command
    assert "--interpret" not in runner.invoke(cli, ["gpu", "build", "--help"]).output
