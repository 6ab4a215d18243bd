"""Planted request-layer mutants: each caught within 200 scenarios, named by the check that fires,
shrunk to at most 3 requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.engine_sandbox import LocalEngine
from kimi_oracle.fuzzers.scenario_fuzz import ScenarioFuzzOptions, fuzz_engine
from kimi_oracle.oracle.engines import load_engine

PLANTED = Path(__file__).resolve().parents[1] / "helpers" / "planted_engines.py"
BASE = PreprocessConfig.k3()
# mutant -> (the check, a phrase its message must hold)
EXPECTED = {
    "rank_local": ("grid_mismatch", "deferred GPU preprocessing produced wrong grids on a consistent batch"),
    "digest_only_cache": ("grid_mismatch", "a cache entry from before the configure was served"),
    "span_from_grid": ("input_ids", "input ids differ from the contract"),
    "resized_framing": ("input_ids", "input ids differ from the contract"),
}


@pytest.mark.parametrize("mutant", sorted(EXPECTED))
def test_planted_mutant_is_caught_named_and_shrunk(mutant):
    check, phrase = EXPECTED[mutant]
    runner = LocalEngine(load_engine(f"{PLANTED}:{mutant}"), BASE)
    run = fuzz_engine(runner, BASE, ScenarioFuzzOptions(examples=200, seed=0, stop_on=(check,)))
    mine = [f for f in run.findings if f.check == check]
    assert mine, f"{mutant}: found only {[f.check for f in run.findings]}"
    finding = mine[0]
    assert finding.example < 200 and phrase in finding.message, finding.message
    assert len(finding.scenario.requests) <= 3, finding.lines()
    first = finding.findings[0]
    if mutant == "rank_local":  # the engine's own raise, with the batch (members, ranks) it concerns
        assert first["details"]["members"] and first["details"]["dp_size"] == finding.scenario.dp_size
    else:  # the request and image it concerns
        assert first["request"] is not None and first["image"] is not None
    if mutant == "span_from_grid":  # fires through a fixed token count
        sc = finding.scenario
        assert sc.configs[sc.requests[first["request"]].config].fixed_output_tokens is not None
    if mutant == "digest_only_cache":  # a repeated image prepared after a configure
        assert len(finding.scenario.configs) > 1 and len(finding.scenario.images) < len(finding.scenario.members())
        # Whichever check fires first (a stale grid, or stale ids when only the token count moved), it
        # is named a stale entry.
        assert all("a cache entry from before the configure was served" in f.message for f in run.findings)
