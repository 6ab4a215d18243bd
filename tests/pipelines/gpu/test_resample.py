"""Host-side tables and pass order against Pillow itself (NumPy emulation, no Triton)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_testlib import full_range
from PIL import Image

from kimi_oracle.core.errors import BackendError
from kimi_oracle.pipelines.gpu import resample as rs


def _random_sizes(rng, n):
    out = []
    for t in range(n):
        w, h = int(rng.integers(1, 60)), int(rng.integers(1, 60))
        if t % 5 == 0:
            w, h = int(rng.integers(1, 4)), int(rng.integers(150, 400))  # taller than 100:1
        if t % 7 == 0:
            w, h = int(rng.integers(150, 400)), int(rng.integers(1, 4))
        ow, oh = int(rng.integers(1, w + 1)), int(rng.integers(1, h + 1))
        if (ow, oh) != (w, h):
            out.append((w, h, ow, oh))
    return out


def _boundary_sizes():
    # (H - h) = 2 (W - w) and its neighbours, both passes needed.
    out = []
    for dw in (1, 2, 5, 13):
        for extra in (-1, 0, 1):
            w, ow = 30 + dw, 30
            oh = 20
            h = oh + 2 * dw + extra
            out.append((w, h, ow, oh))
    return out


def _u8(img):
    return np.asarray(img)


def _emulate_u8(arr, mode, ow, oh):
    mask = rs.domain_xor(mode)
    if mask is not None:
        return rs.resample_numpy(arr ^ mask, ow, oh) ^ mask
    if mode in ("RGBA", "LA"):
        return rs.unpremultiply_numpy(rs.resample_numpy(rs.premultiply_numpy(arr), ow, oh))
    return rs.resample_numpy(arr, ow, oh)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "LA", "CMYK", "LAB", "PA", "YCbCr"])
def test_8bit_bicubic_matches_pillow(mode):
    rng = np.random.default_rng(hash(mode) % 1000)
    nb = len(Image.new(mode, (1, 1)).getbands())
    for w, h, ow, oh in _random_sizes(rng, 40) + _boundary_sizes():
        arr = rng.integers(0, 256, (h, w, nb), dtype=np.uint8)
        if nb == 1:
            arr = arr[..., 0]
        img = Image.frombytes(mode, (w, h), arr.tobytes())
        got = _u8(img.resize((ow, oh), Image.Resampling.BICUBIC))
        exp = _emulate_u8(np.asarray(img), mode, ow, oh)
        assert np.array_equal(got, exp), (mode, (w, h), (ow, oh), rs.pass_order(w, h, ow, oh))


@pytest.mark.parametrize("mode", ["I;16", "I;16B", "I;16L", "I;16N", "I", "F"])
def test_wide_bicubic_matches_pillow(mode):
    rng = np.random.default_rng(7)
    for k, (w, h, ow, oh) in enumerate(_random_sizes(rng, 25) + _boundary_sizes()):
        img = full_range(w, h, mode, seed=k)
        got_img = img.resize((ow, oh), Image.Resampling.BICUBIC)
        if mode.startswith("I;16"):
            # The resampler's reading of the bytes (Pillow reads I;16N big-endian, others
            # little-endian, on a little-endian host): compare in that interpretation.
            dt = ">u2" if mode == "I;16N" else "<u2"
            src = np.frombuffer(img.tobytes(), dt).reshape(h, w).astype(np.uint16)
            got = np.frombuffer(got_img.tobytes(), dt).reshape(oh, ow).astype(np.uint16)
        else:
            src = np.asarray(img)
            got = np.asarray(got_img)
        exp = rs.resample_numpy(src, ow, oh)
        assert got.dtype.itemsize == exp.dtype.itemsize
        assert np.array_equal(np.ascontiguousarray(got).view(np.uint8),
                              np.ascontiguousarray(exp).view(np.uint8)), (mode, (w, h), (ow, oh))


@pytest.mark.parametrize("mode", ["P", "1"])
def test_nearest_matches_pillow(mode):
    rng = np.random.default_rng(3)
    for w, h, ow, oh in _random_sizes(rng, 40) + [(1000, 3, 7, 1), (7, 999, 3, 2), (13, 11, 12, 1)]:
        arr = rng.integers(0, 256, (h, w), dtype=np.uint8)
        img = Image.frombytes("L", (w, h), arr.tobytes())
        if mode == "1":
            img = img.point(lambda v: 255 if v > 127 else 0).convert("1", dither=Image.Dither.NONE)
        else:
            img = img.convert("P") if False else Image.frombytes("P", (w, h), arr.tobytes())
        src = np.asarray(img).astype(np.uint8)
        got = np.asarray(img.resize((ow, oh), Image.Resampling.BICUBIC)).astype(np.uint8)
        assert np.array_equal(got, rs.nearest_numpy(src, ow, oh)), (mode, (w, h), (ow, oh))


def test_pass_order_boundary():
    assert rs.pass_order(10, 10, 10, 10) == ()
    assert rs.pass_order(10, 10, 5, 10) == ("h",)
    assert rs.pass_order(10, 10, 10, 5) == ("v",)
    # vertical first iff (H - h) > 0 and (H - h) > 2 (W - w)
    assert rs.pass_order(12, 25, 10, 20) == ("v", "h")  # 5 > 4
    assert rs.pass_order(12, 24, 10, 20) == ("h", "v")  # 4 == 4
    assert rs.pass_order(20, 10, 10, 5) == ("h", "v")


def test_the_order_rule_is_observable():
    # A case where the two orders give different bytes, so the emulation test above is a
    # real check of the rule and not vacuous.
    rng = np.random.default_rng(11)
    found = 0
    for w, h, ow, oh in _boundary_sizes() * 3:
        arr = rng.integers(0, 256, (h, w), dtype=np.uint8)
        hv = rs._pass_u8(rs._pass_u8(arr, 1, ow), 0, oh)
        vh = rs._pass_u8(rs._pass_u8(arr, 0, oh), 1, ow)
        found += not np.array_equal(hv, vh)
    assert found > 0


def test_8bit_weights_round_half_away_from_zero():
    k = rs.coeffs_8bit(7, 3)
    _, cnt, kk = rs.bicubic_coeffs(7, 3)
    for i in range(3):
        for j in range(cnt[i]):
            x = kk[i, j] * (1 << 22)
            exp = int(x + 0.5) if x >= 0 else -int(-x + 0.5)
            assert k[i, j] == exp


def test_unverified_pillow_version_is_refused(monkeypatch):
    import PIL

    monkeypatch.setattr(PIL, "__version__", "12.1.0")
    with pytest.raises(BackendError, match="Pillow 12.1.0"):
        rs.check_pillow()
    monkeypatch.setattr(PIL, "__version__", "13.0.1")
    rs.check_pillow()
