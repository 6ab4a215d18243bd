"""A pruned copy of SGLang's release (issue 45): only the files its adapters load, well under the
10 MB a device run may carry, loading and computing exactly as the release does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from cli_run import run_cli
from kimi_oracle.adapters.engines import describe_engines, engine_candidate, engine_request_layer
from kimi_oracle.adapters.prune import MAX_BYTES, prune
from kimi_oracle.adapters.sources import locate
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError


def test_a_pruned_sglang_tree_loads_and_computes_as_the_release(sglang_tree, tmp_path):
    root, size = prune("sglang@0.5.23", tmp_path / "tree")
    assert size < MAX_BYTES and size == sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert locate("sglang", "sglang", str(root)).version == "0.5.23"
    rng = np.random.default_rng(1)
    images = [Image.fromarray(rng.integers(0, 256, (30, 40, 4), dtype=np.uint8), "RGBA"),
              Image.fromarray(rng.integers(0, 256, (20, 50, 3), dtype=np.uint8))]
    config = PreprocessConfig.profile("k3")
    full, _, _ = engine_candidate("sglang@0.5.23")
    pruned, description, _ = engine_candidate(f"sglang@{root}")
    (a, ga), (b, gb) = full(images, config), pruned(images, config)
    assert torch.equal(a, b) and torch.equal(ga, gb)
    assert "on cpu tensors" in description  # (no CUDA device here: SGLang's torch branch)
    engine_request_layer(f"sglang@{root}")  # its request layer's files are there too


def test_what_cannot_be_pruned_or_where_is_refused(sglang_tree, tmp_path):
    with pytest.raises(CandidateError, match="cannot be pruned"):
        prune("transformers@5.23.0", tmp_path / "tf")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("kept")
    with pytest.raises(CandidateError, match="not empty"):
        prune("sglang@0.5.23", tmp_path / "full")
    assert (tmp_path / "full" / "x").read_text() == "kept"


def test_engines_says_where_each_path_runs_and_prune_needs_out(capsys):
    rows = describe_engines()
    assert {r["device"] for r in rows if r["role"] != "none"} <= {"cpu", "cuda"}
    sglang = next(r for r in rows if r["path"] == "sglang" and r["role"] == "candidate")
    assert sglang["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    code, _, err = run_cli(capsys, "engines", "--prune", "sglang@0.5.23")
    assert code == 2 and "--prune ENGINE@SOURCE and --out DIR go together" in err
