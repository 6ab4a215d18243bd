"""The built-in engines' planners, taken from the released code, through `--planner`."""

from __future__ import annotations

import dataclasses

import pytest

from kimi_oracle.adapters.engines import describe_engines, engine_planner, is_engine_spec
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.geometry import plan
from kimi_oracle.oracle.planner import load_planner

SIZES = [(1000, 700), (1, 1), (7168, 7168), (20000, 30), (2935, 2)]


def test_engine_specs():
    assert is_engine_spec("sglang") and is_engine_spec("transformers@5.23.0") and is_engine_spec("sglang@/x/y")
    assert not is_engine_spec("sglang_fork.mod:plan") and not is_engine_spec("sglangx")
    assert load_planner("sglang-0.5.23").spec == "sglang-0.5.23"  # the model stays the built-in it was


def test_sglang_planner_agrees_with_the_checkpoint_geometry(sglang_tree):
    func, description = engine_planner("sglang@0.5.23")
    assert "0.5.23 navit_resize_config" in description
    for config in (PreprocessConfig.k3(), PreprocessConfig.k25()):
        for w, h in SIZES:
            got, want = func(w, h, config), plan(w, h, config)
            assert (got["new_width"], got["new_height"], got["num_tokens"]) == (want.new_w, want.new_h, want.num_tokens)


def test_transformers_planner_ignores_fixed_output_tokens(transformers_tree):
    planner = load_planner("transformers@5.23.0")
    config = dataclasses.replace(PreprocessConfig.k25(), fixed_output_tokens=64)
    # 1000x700, patch 14, merge 2: padded to 1008 x 700, 36 x 25 = 900 merged tokens (by hand),
    # where the checkpoint's plan gives the fixed 64.
    assert planner.func(1000, 700, config) == {"new_width": 1000, "new_height": 700, "pad_width": 8,
                                               "pad_height": 0, "num_tokens": 900}
    assert plan(1000, 700, config).num_tokens == 64


def test_unadapted_paths_are_refused_cleanly():
    with pytest.raises(CandidateError, match="has no path 'sglang-cpu' as a planner"):
        engine_planner("sglang-cpu@0.5.23")


def test_describe_engines_says_why_an_engine_cannot_load(monkeypatch):
    monkeypatch.setattr("kimi_oracle.adapters.engines.locate",
                        lambda *a: (_ for _ in ()).throw(CandidateError("package 'vllm' is not installed here")))
    rows = describe_engines()
    assert {r["engine"] for r in rows} == {"sglang", "transformers", "vllm", "paddleformers", "mlx-vlm", "lmdeploy",
                                           "nemo-automodel", "smg"}
    listed = [r for r in rows if r["role"] == "none"]  # nothing to adapt: never loaded, and why
    assert {r["engine"] for r in listed} == {"nemo-automodel", "smg"}
    assert all(r["loads_from"] == "not loaded: nothing to adapt" and r["lacks"] for r in listed)
    rows = [r for r in rows if r["role"] != "none"]
    assert all(r["loads_from"].startswith("not loadable: package") for r in rows)
    assert {("paddleformers", "planner"), ("paddleformers", "candidate"), ("mlx-vlm", "candidate"),
            ("mlx-vlm-k3", "candidate"), ("lmdeploy", "candidate")} <= {(r["path"], r["role"]) for r in rows
                                                                        if r["adapted"]}
    assert "no planner function" in next(r["lacks"] for r in rows if r["engine"] == "mlx-vlm")
    adapted = {(r["path"], r["role"]) for r in rows if r["adapted"]}
    assert {("sglang", "planner"), ("sglang", "candidate"), ("transformers", "planner"),
            ("transformers", "candidate"), ("vllm", "planner"), ("vllm", "candidate"), ("vllm-k3", "candidate"),
            ("sglang-cpu", "candidate"), ("sglang", "request engine")} <= adapted


def test_a_real_request_layer_path_it_lacks_is_refused_cleanly():
    from kimi_oracle.oracle.engines import load_engine

    with pytest.raises(CandidateError, match="has no path 'sglang-cpu' as a request engine"):
        load_engine("sglang-cpu@0.5.23")
    assert load_engine("sglang-0.5.23").spec == "sglang-0.5.23"  # the model is untouched
