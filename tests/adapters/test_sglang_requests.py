"""`--engine sglang@0.5.23`: SGLang's own K3 request layer (processor, artifact cache,
`get_image_feature` over simulated ranks), run from the released wheel on small counts."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from PIL import Image

from cli_run import exit_code_of as run_cli
from kimi_oracle.adapters.engines import engine_candidate
from kimi_oracle.adapters.sglang_requests import FILES, PROCESSOR
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.tokenizer import Tokenizer
from kimi_oracle.oracle.engines import load_engine


def test_prepare_and_encode_on_the_release(sglang_tree):
    factory = load_engine("sglang@0.5.23")
    assert "sglang 0.5.23" in factory.description
    tok = Tokenizer()
    engine = factory(PreprocessConfig.k3(), tok)
    images = [Image.new("RGB", (30, 20), (10, 200, 30)), Image.new("RGBA", (17, 33), (1, 2, 3, 100))]
    ids, items = engine.prepare([5, tok.media_pad_id, 6, tok.media_pad_id], images, ["deferred", "eager"])
    # By hand (patch 14, merge 2): 30x20 pads to 56x28, grid (1, 2, 4), 2 tokens; 17x33 pads to
    # 28x56, grid (1, 4, 2), 2 tokens. Each span: <|media_begin|>, "image WxH" one id per byte,
    # <|media_content|>, the pads, <|media_end|>: the first pads at 1 + 1 + 11 + 1 = 14, the
    # second at 1 + 16 + 1 + 13 = 31.
    assert [list(it.grid_thw) for it in items] == [[1, 2, 4], [1, 4, 2]]
    assert [it.offsets for it in items] == [(14, 15), (31, 32)]
    assert len(ids) == 1 + (13 + 2 + 1) + 1 + (13 + 2 + 1)
    one = engine.encode(items, 1)
    assert one.shape == (16, 3, 14, 14) and one.dtype == torch.float32
    # Sharding over ranks and re-assembly keep the rows and their order (a repeat included).
    for dp in (2, 3):
        assert torch.equal(engine.encode(items + items[:1], dp), torch.cat([one, one[:8]]))


def test_the_artifact_cache_and_the_deferred_route_are_sglangs(sglang_tree):
    tok, config = Tokenizer(), PreprocessConfig.k3()
    engine = load_engine("sglang@0.5.23")(config, tok)
    image = Image.new("RGBA", (17, 33), (1, 2, 3, 100))
    counts = []
    for path in ("deferred", "deferred", "eager", "eager"):
        engine.prepare([tok.media_pad_id], [image], [path])
        counts.append((engine.cache.hits, engine.cache.misses))
    # SGLang's own counters: a miss, then a hit, per route (the route is part of the artifact key).
    assert counts == [(0, 1), (1, 1), (1, 2), (2, 2)]
    # The deferred item's rows are what SGLang's deferred GPU path (candidate `sglang`) gives the image.
    preprocess, _, _ = engine_candidate("sglang@0.5.23")
    _, items = engine.prepare([tok.media_pad_id], [image], ["deferred"])
    assert torch.equal(engine.encode(items, 1), preprocess([image], config)[0])


def test_mixed_configs_finds_the_first_items_statistics(sglang_tree, tmp_path, capsys):
    # Seed 1 meets the case on one rank, where SGLang keeps the batch order (found after 7 scenarios).
    code = run_cli("fuzz", "--engine", "sglang@0.5.23", "--mixed-configs", "--examples", "8", "--seed", "1",
                   "--out", tmp_path)
    out = capsys.readouterr().out
    assert code == 1, out
    assert "rows_invariance" in out and "the first item's mean/std/background was applied to the whole group" in out


def test_without_mixed_configs_the_release_passes(sglang_tree, tmp_path, capsys):
    code = run_cli("fuzz", "--engine", "sglang@0.5.23", "--examples", "40", "--seed", "1", "--out", tmp_path)
    assert code == 0, capsys.readouterr().out


def test_a_tree_without_a_called_function_is_one_exit_2_line(sglang_tree, tmp_path, capsys):
    for relative in ("__init__.py", *FILES):
        target = tmp_path / "sglang" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sglang_tree.file(relative), target)
    processor = tmp_path / "sglang" / PROCESSOR
    text = processor.read_text()
    assert text.count("    def compose_request(") == 1
    processor.write_text(text.replace("    def compose_request(", "    def compose_request_v2("))
    code = run_cli("fuzz", "--engine", f"sglang@{tmp_path}", "--examples", "2", "--out", tmp_path / "out")
    captured = capsys.readouterr()
    lines = [line for line in (captured.out + captured.err).splitlines() if "compose_request" in line]
    assert code == 2, captured
    assert len(lines) == 1, captured
    assert str(Path(processor)) in lines[0] and "KimiK3ImageProcessor.compose_request" in lines[0]
    assert "0.5.23" in lines[0]
