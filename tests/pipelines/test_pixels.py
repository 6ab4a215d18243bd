"""pipelines/pixels.py: rows of a Pillow image read band by band, against `np.asarray` (Pillow's
own bytes), and the reference reading an RGB image that way against the spec model."""

from __future__ import annotations

import numpy as np
import pytest
from checkpoint_model import spec_preprocess
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.pipelines import fused, pixels, reference


def _noise(mode: str, size: tuple[int, int], seed: int = 0) -> Image.Image:
    bands = len(Image.new(mode, (1, 1)).getbands())
    data = np.random.default_rng(seed).integers(0, 256, size[0] * size[1] * bands, dtype=np.uint8)
    return Image.frombytes(mode, size, data.tobytes())


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L"])
@pytest.mark.parametrize("size", [(1, 1), (37, 23), (2400, 1800)])  # 2400x1800 RGB, RGBA: two Pillow blocks
def test_rows_are_asarrays_rows(mode, size):
    img = _noise(mode, size)
    want = np.asarray(img).reshape(size[1], size[0], -1)
    rows = pixels.row_reader(img)
    for y0, y1 in [(0, 1), (0, size[1]), (size[1] // 2, size[1]), (size[1] - 1, size[1])]:
        got = rows(y0, y1)
        assert got.dtype == np.uint8 and got.shape == (y1 - y0, size[0], want.shape[2])
        assert got.tobytes() == want[y0:y1].tobytes()


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
@pytest.mark.parametrize("size", [(1, 1), (37, 23), (2400, 1800)])
def test_planes_are_asarrays_channels(mode, size):
    img = _noise(mode, size, seed=2)
    want = np.asarray(img)
    planes = pixels.plane_reader(img)
    for y0, y1 in [(0, 1), (0, size[1]), (size[1] // 3, size[1])]:
        got = planes(y0, y1)
        assert len(got) == len(mode)
        for c in range(len(mode)):
            assert got[c].shape == (y1 - y0, size[0])
            assert got[c].tobytes() == np.ascontiguousarray(want[y0:y1, :, c]).tobytes()


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_planes_without_the_encoder_are_asarrays_channels(monkeypatch, mode):
    img = _noise(mode, (29, 17), seed=3)
    want = np.asarray(img)
    monkeypatch.setattr(pixels, "_encoded_rows", lambda *args: None)  # another Pillow's answer
    got = pixels.plane_reader(img)(4, 13)
    assert len(got) == len(mode)
    for c in range(len(mode)):
        assert np.ascontiguousarray(got[c]).tobytes() == np.ascontiguousarray(want[4:13, :, c]).tobytes()


@pytest.mark.parametrize("mode", ["L", "LA", "CMYK"])
def test_plane_reader_refuses_other_modes(mode):
    with pytest.raises(ValueError):
        pixels.plane_reader(_noise(mode, (4, 4)))


def test_this_pillow_answers_through_the_encoder():
    # The fast path is taken here (a fallback on every call would pass the tests above, slowly).
    img = _noise("RGB", (31, 9))
    got = pixels._encoded_rows(img, 2, 7, 3)
    assert got is not None and got.tobytes() == np.asarray(img)[2:7].tobytes()
    green = pixels._encoded_rows(img, 2, 7, 1, "G")
    assert green is not None and green.tobytes() == np.ascontiguousarray(np.asarray(img)[2:7, :, 1]).tobytes()


def test_rows_without_the_encoder_are_asarrays_rows(monkeypatch):
    img = _noise("RGB", (29, 17))
    want = np.asarray(img)
    monkeypatch.setattr(pixels, "_encoded_rows", lambda *args: None)  # another Pillow's answer
    rows = pixels.row_reader(img)
    assert rows(3, 11).tobytes() == want[3:11].tobytes()
    assert rows(0, 17).tobytes() == want.tobytes()


@pytest.mark.parametrize("profile", ["k3", "k25"])
@pytest.mark.parametrize("size", [(28, 28), (57, 43), (300, 211)])
def test_reference_reading_rgb_by_rows_is_the_spec(monkeypatch, profile, size):
    monkeypatch.setattr(fused, "_BAND_BYTES", 1)  # one patch row a band: every band edge read
    img = _noise("RGB", size, seed=size[0])
    cfg = PreprocessConfig.profile(profile)
    read: list[tuple[int, int]] = []
    real = pixels.plane_reader

    def counting(image):
        planes = real(image)
        return lambda y0, y1: read.append((y0, y1)) or planes(y0, y1)

    monkeypatch.setattr(pixels, "plane_reader", counting)
    got = reference.preprocess([img], cfg, threads=1)
    want_pixels, want_grids = spec_preprocess([img], cfg.to_hf_json())
    assert read, "the RGB image was not read by rows"
    assert got.grid_thws.tolist() == want_grids.tolist()
    assert got.pixel_values.numpy().tobytes() == want_pixels.tobytes()


@pytest.mark.parametrize("size", [(28, 28), (57, 43), (300, 211)])
@pytest.mark.parametrize("pattern", ["chessboard", "white"])
@pytest.mark.parametrize("encoder", [True, False], ids=["encoder", "asarray"])
def test_reference_compositing_rgba_by_bands_is_the_spec(monkeypatch, size, pattern, encoder):
    import dataclasses
    monkeypatch.setattr(fused, "_BAND_BYTES", 1)  # one patch row a band: every band edge composited
    monkeypatch.setattr(fused, "_VECTOR_MIN_PIXELS", 1)
    if not encoder:  # another Pillow: rows and planes sliced from np.asarray (strided planes)
        monkeypatch.setattr(pixels, "_encoded_rows", lambda *args: None)
    img = _noise("RGBA", size, seed=size[1])
    cfg = PreprocessConfig.profile("k3")
    cfg = dataclasses.replace(cfg, transparent_bg_config=dataclasses.replace(cfg.transparent_bg_config, pattern=pattern))
    calls: list[int] = []
    real = fused.patches_from_composite
    monkeypatch.setattr(fused, "patches_from_composite", lambda *a, **k: calls.append(1) or real(*a, **k))
    vector: list[int] = []
    real_vector = fused._vector_fill
    monkeypatch.setattr(fused, "_vector_fill", lambda *a, **k: vector.append(1) or real_vector(*a, **k))
    got = reference.preprocess([img], cfg, threads=1)
    want_pixels, want_grids = spec_preprocess([img], cfg.to_hf_json())
    assert calls, "the RGBA image was not composited by bands"
    assert vector, "the checkpoint's blend was not composited by the vector passes"
    assert got.grid_thws.tolist() == want_grids.tolist()
    assert got.pixel_values.numpy().tobytes() == want_pixels.tobytes()
