"""The built-in request-layer model `sglang-0.5.23`: passes default scenarios, fails mixed configs
as SGLang 0.5.23 does, raises its two errors on inconsistent bookkeeping; the held-out adapter."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.tokenizer import Tokenizer
from kimi_oracle.fuzzers.engine_sandbox import LocalEngine
from kimi_oracle.fuzzers.scenario_fuzz import ScenarioFuzzOptions, fuzz_engine
from kimi_oracle.oracle.engines import load_engine
from kimi_oracle.pipelines.engines.sglang_0_5_23_requests import WRONG_GRIDS, WRONG_LENGTH, engine

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
BASE = PreprocessConfig.k3()


def _local(spec: str) -> LocalEngine:
    return LocalEngine(load_engine(spec), BASE)


def test_builtin_passes_default_scenarios():
    run = fuzz_engine(_local("sglang-0.5.23"), BASE, ScenarioFuzzOptions(examples=200, seed=11))
    assert run.examples == 200 and run.findings == [], [f.lines() for f in run.findings]


@pytest.mark.slow
def test_builtin_passes_1000_default_scenarios():
    run = fuzz_engine(_local("sglang-0.5.23"), BASE, ScenarioFuzzOptions(examples=1000, seed=0))
    assert run.findings == [], [f.lines() for f in run.findings]


def test_builtin_fails_mixed_configs_with_the_first_items_normalization():
    run = fuzz_engine(_local("sglang-0.5.23"), BASE, ScenarioFuzzOptions(examples=100, seed=2, mixed_configs=True))
    [finding] = [f for f in run.findings if f.check == "rows_invariance"]
    assert len(finding.scenario.requests) <= 3
    assert "the first item's mean/std/background was applied to the whole group" in finding.message
    first = finding.findings[0]
    assert first["request"] is not None and first["image"] is not None and first["rank"] is not None
    assert first["details"]["applied_from"] != [first["request"], first["image"]]


def test_engine_raises_its_two_errors_on_inconsistent_bookkeeping(monkeypatch):
    tok = Tokenizer()
    eng = engine(BASE, tok)
    img = Image.new("RGB", (30, 20), (10, 20, 30))
    _, [item] = eng.prepare([tok.media_pad_id], [img], ["deferred"])
    assert tuple(item.grid_thw) == (1, 2, 4) and eng.encode([item], 1).shape == (8, 3, 14, 14)
    wrong = dataclasses.replace(item, grid_thw=(1, 4, 2))  # the table says 8 rows, other shape
    with pytest.raises(RuntimeError, match=WRONG_GRIDS):
        eng.encode([wrong], 1)

    # Rows that do not add up to the grids the device path reports: the feature-length error.
    from kimi_oracle.pipelines.engines import sglang_0_5_23 as image_model
    real = image_model.from_tensors

    def drop_a_row(*args, **kwargs):
        out = real(*args, **kwargs)
        return type(out)(out.pixel_values[:-1], out.grid_thws)

    monkeypatch.setattr(image_model, "from_tensors", drop_a_row)
    with pytest.raises(RuntimeError, match=WRONG_LENGTH):
        eng.encode([item], 1)


def test_cache_is_keyed_by_digest_and_fingerprint():
    tok = Tokenizer()
    eng = engine(BASE, tok)
    img = Image.new("RGB", (60, 60), (1, 2, 3))
    _, [a] = eng.prepare([tok.media_pad_id], [img], ["eager"])
    # 60x60: 60 // 14 = 4 patches a side, budget 4: scale sqrt(4 / 16) = 0.5, 30x30 padded to 56x56.
    eng.configure(dataclasses.replace(BASE, in_patch_limit=4))
    _, [b] = eng.prepare([tok.media_pad_id], [img], ["eager"])
    assert len(eng.cache) == 2 and tuple(a.grid_thw) == (1, 6, 6) and tuple(b.grid_thw) == (1, 4, 4)


def test_held_out_adapter_runs_unchanged():
    # Written against the documented interface only (dict items, no kimi_oracle import).
    source = (HELPERS / "held_out_adapter.py").read_text()
    assert "kimi_oracle" not in source.split('"""', 2)[2]
    run = fuzz_engine(_local(str(HELPERS / "held_out_adapter.py") + ":engine"), BASE,
                      ScenarioFuzzOptions(examples=100, seed=4))
    assert run.findings == [], [f.lines() for f in run.findings]
    assert _local(str(HELPERS / "held_out_adapter.py") + ":engine").paths == ("default",)


def test_pixels_compares_rows_with_the_reference():
    planted = str(HELPERS / "planted_engines.py")
    clean = fuzz_engine(_local(f"{planted}:eager_only"), BASE, ScenarioFuzzOptions(examples=40, seed=1, pixels=True))
    assert clean.findings == [], [f.lines() for f in clean.findings]
    run = fuzz_engine(_local("sglang-0.5.23"), BASE, ScenarioFuzzOptions(examples=80, seed=1, pixels=True))
    [finding] = [f for f in run.findings if f.check == "pixel_mismatch"]
    assert "against the reference" in finding.message and finding.findings[0]["details"]["path"] == "deferred"
    # Diagnosed as the image fuzzer's findings are: the engine model's known float normalization.
    assert finding.findings[0]["details"]["diagnosis"]["root_causes"] and "root cause:" in finding.message
