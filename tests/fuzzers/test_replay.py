"""Each atheris harness as a plain pytest replay over its committed corpus (no atheris needed)."""

from __future__ import annotations

import io
import warnings

import pytest
import torch
from nightly_helpers import FUZZ, planted
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.images import pack_raw, unpack_raw
from kimi_oracle.fuzzers.harnesses import Harness, HarnessSettings, PyFuzzedDataProvider
from kimi_oracle.inputs.corpus import entries
from kimi_oracle.oracle.candidates import load_candidate
from kimi_oracle.pipelines import reference

STRUCTURED = entries(FUZZ / "corpus" / "structured")
DECODER = entries(FUZZ / "corpus" / "decoder")


def _harness(name: str, candidate: str = "reference", profile: str = "k3") -> Harness:
    return Harness(name, HarnessSettings(candidate=candidate, profile=profile))


def _replay(harness: Harness, path):
    data = path.read_bytes()
    return harness.evaluate(data, PyFuzzedDataProvider(data) if harness.name == "structured" else None)


def test_corpora_are_committed_and_small():
    assert len(STRUCTURED) >= 20 and len(DECODER) >= 20
    assert all(p.stat().st_size <= 65536 for p in STRUCTURED + DECODER)


@pytest.mark.parametrize("profile", ["k3", "k25"])
def test_structured_corpus_replays_clean_against_the_reference(profile):
    harness = _harness("structured", profile=profile)
    statuses = [_replay(harness, p).status for p in STRUCTURED]
    assert set(statuses) <= {"ok", "rejected"}
    assert statuses.count("ok") >= len(STRUCTURED) // 2


@pytest.mark.parametrize("profile", ["k3", "k25"])
def test_decoder_corpus_replays_clean_against_the_reference(profile):
    harness = _harness("decoder", profile=profile)
    outcomes = {p.name: _replay(harness, p) for p in DECODER}
    assert all(o.status in ("ok", "rejected") for o in outcomes.values()), {
        n: o.verdict.message for n, o in outcomes.items() if o.status == "finding"}
    # Files Pillow refuses (and the bomb, over the harness' cap) are rejected inputs.
    for name, outcome in outcomes.items():
        if name.startswith("pillow_bad_"):
            assert outcome.status == "rejected", name
    assert sum(o.status == "ok" for o in outcomes.values()) >= len(DECODER) - 6


def test_over_cap_images_are_rejected_not_findings():
    buf = io.BytesIO()
    Image.new("RGB", (300, 300)).save(buf, "PNG")
    settings = HarnessSettings(max_pixels=300 * 300 - 1)
    outcome = Harness("decoder", settings).evaluate(buf.getvalue())
    assert outcome.status == "rejected" and "pixel cap" in outcome.reason


def test_replay_can_fail_structured():
    # A candidate that loses a patch row must be caught on the committed corpus.
    harness = _harness("structured", planted("drops_last_row"))
    checks = {_replay(harness, p).check for p in STRUCTURED[:20]}
    assert "feature_length" in checks


def test_replay_can_fail_decoder():
    harness = _harness("decoder", planted("bumps_palette"))
    found = [p.name for p in DECODER if _replay(harness, p).check == "pixel_mismatch"]
    assert any("gif" in n or "_p_" in n or "pal" in n for n in found)
    harness = _harness("decoder", planted("wrong_dtype"))
    assert {_replay(harness, p).check for p in DECODER} >= {"shape_dtype"}


def test_executor_transport_keeps_what_the_checkpoint_depends_on():
    # Images cross the pipe to the candidate's process: mode, palette, transparency must survive.
    cfg = PreprocessConfig.k3_small()
    refused, compared = [], set()
    for path in DECODER:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                img = Image.open(path)
                img.load()
        except (OSError, Image.DecompressionBombError):
            refused.append(path.name)
            continue
        back = unpack_raw(pack_raw(img))
        assert back.mode == img.mode and back.size == img.size, path.name
        want = reference.preprocess([img], cfg)
        got = reference.preprocess([back], cfg)
        assert torch.equal(want.pixel_values, got.pixel_values), path.name
        compared.add(img.mode + ("+t" if "transparency" in img.info else ""))
    # Only the files fuzz/corpus/NOTICE names as refused by Pillow (`pillow_bad_*`) are skipped,
    # and the images compared carry palettes, transparency and the special modes.
    assert refused and all(name.startswith("pillow_bad_") for name in refused)
    assert len(refused) == sum(p.name.startswith("pillow_bad_") for p in DECODER)
    assert {"1", "L", "LA", "P", "P+t", "RGB", "RGBA", "CMYK", "I;16", "I", "F"} <= compared


def test_replay_module_entry_point(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kimi_oracle.fuzzers.atheris_entry", "decoder", "--replay",
                           *[str(p) for p in DECODER[:5]]], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("\n") == 5
