"""make_image: the PIL image a CaseParams describes, the same on every machine; image equality."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from PIL import Image

from kimi_oracle.core.images import open_encoded
from kimi_oracle.inputs.contents import _palette, alpha_array, content_array
from kimi_oracle.inputs.params import CaseParams
from kimi_oracle.inputs.requests import encode

# Bumped whenever make_image or a size builder changes its output for existing parameters
# (golden files record it so a generator change is never mistaken for a pipeline change).
GENERATOR_VERSION = 1


def make_image(params: CaseParams) -> Image.Image:
    """The PIL image described by `params`; identical bytes, palette and info on every call.

    With a container, the image Pillow opens from the encoded file (frame 0 loaded; the file
    bytes travel with it, `core.images.encoded_bytes`)."""
    if not params.container:
        return _memory_image(params)
    # The frames are built from what `_memory_image` reads (no request fields).
    frames = [_memory_image(params)]
    for k in range(1, params.frames):
        # Frame k: other content; odd frames smaller than the canvas (placed at the top left).
        w, h = params.width, params.height
        if k % 2:
            w, h = max(1, w - w // 3), max(1, h - h // 3)
        frames.append(_memory_image(_Look(w, h, params.mode, params.alpha, params.content,
                                          (params.seed * 31 + k) % 2**32, params.square)))
    data = encode(frames, params.container, orientation=params.orientation, icc=params.icc,
                  disposal=params.disposal, dpi=params.dpi)
    return open_encoded(data, max_pixels=0, name=params.describe())


def _with_band(bands: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """uint8 (h, w, n + 1): `bands` ((h, w, n) or (h, w)) and then `extra` (h, w), as np.dstack."""
    if bands.ndim == 2:
        bands = bands[..., None]
    out = np.empty(bands.shape[:2] + (bands.shape[2] + 1,), dtype=np.uint8)
    out[..., :-1] = bands
    out[..., -1] = extra
    return out


# A palette image's per-entry alpha: 16 levels, by the low four bits of the index.
_P_ALPHA_LEVELS = bytes((i & 15) * 17 for i in range(256))


class _Look(NamedTuple):
    """What `_memory_image` reads of a `CaseParams` (an animation's later frames)."""

    width: int
    height: int
    mode: str
    alpha: str
    content: str
    seed: int
    square: int

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height


# The modes whose pixels use the alpha pattern's array (P: unless opaque or keyed).
_ALPHA_ARRAY_MODES = frozenset({"RGBA", "LA", "PA", "P"})


def _memory_image(params: "CaseParams | _Look") -> Image.Image:
    mode = params.mode
    rgb = content_array(params)  # type: ignore[arg-type]
    alpha = None
    if mode in _ALPHA_ARRAY_MODES and not (mode == "P" and params.alpha in ("opaque", "key")):
        alpha = alpha_array(params)  # type: ignore[arg-type]
    lum = np.ascontiguousarray(rgb[..., 0])
    if mode in ("RGB", "RGBA", "L", "LA", "1"):
        return _eight_bit_image(params, rgb, lum, alpha)
    if mode in ("P", "PA"):
        return _palette_image(params, lum, alpha)
    return _other_image(params, rgb, lum)


def _eight_bit_image(params: "CaseParams | _Look", rgb: np.ndarray, lum: np.ndarray,
                     alpha: np.ndarray | None) -> Image.Image:
    """RGB, RGBA, L, LA and 1 images (a colour key where the pattern is "key")."""
    mode = params.mode
    size = params.size
    if mode == "RGB":
        img = Image.frombytes("RGB", size, rgb.tobytes())
        if params.alpha == "key":
            img.info["transparency"] = tuple(int(v) for v in rgb[0, 0])
        return img
    if mode == "RGBA":
        return Image.frombytes("RGBA", size, _with_band(rgb, alpha).tobytes())
    if mode == "L":
        img = Image.frombytes("L", size, lum.tobytes())
        if params.alpha == "key":
            img.info["transparency"] = int(lum[0, 0])
        return img
    if mode == "LA":
        return Image.frombytes("LA", size, _with_band(lum, alpha).tobytes())
    img = Image.frombytes("L", size, np.where(lum > 127, 255, 0).astype(np.uint8).tobytes()).convert(
        "1", dither=Image.Dither.NONE
    )
    if params.alpha == "key":
        img.info["transparency"] = 255 if lum[0, 0] > 127 else 0
    return img


def _palette_image(params: "CaseParams | _Look", lum: np.ndarray, alpha: np.ndarray | None) -> Image.Image:
    """P and PA images, with the seed's palette."""
    mode = params.mode
    size = params.size
    if mode == "P":
        if params.alpha in ("opaque", "key"):
            index = lum
        else:
            # 16 colours x 16 alpha levels; binary patterns keep exact 0 / 255 alpha.
            index = ((lum >> 4) << 4) | (alpha >> 4)
        img = Image.frombytes("P", size, np.ascontiguousarray(index).tobytes())
        img.putpalette(_palette(params), rawmode="RGB")
        if params.alpha == "key":
            img.info["transparency"] = int(index[0, 0])
        elif params.alpha != "opaque":
            img.info["transparency"] = _P_ALPHA_LEVELS
        return img
    img = Image.frombytes("PA", size, _with_band(lum, alpha).tobytes())
    img.putpalette(_palette(params), rawmode="RGB")
    return img


def _other_image(params: "CaseParams | _Look", rgb: np.ndarray, lum: np.ndarray) -> Image.Image:
    """CMYK, 16- and 32-bit integer, float, LAB and YCbCr images."""
    mode = params.mode
    size = params.size
    if mode == "CMYK":
        brightest = np.maximum(np.maximum(rgb[..., 0], rgb[..., 1]), rgb[..., 2])
        return Image.frombytes("CMYK", size, _with_band(rgb, (255 - brightest) // 2).tobytes())
    if mode in ("I;16", "I;16B"):
        # 0..382: half the values survive the clip to 0..255 of the RGB conversion.
        values = (lum.astype(np.uint32) * 3 // 2).astype(np.uint16)
        dtype = "<u2" if mode == "I;16" else ">u2"
        img = Image.frombytes(mode, size, values.astype(dtype).tobytes())
        if params.alpha == "key":
            img.info["transparency"] = int(values[0, 0])
        return img
    if mode == "I":
        values = lum.astype(np.int32) * 2 - 128  # -128..382: both clips of the conversion
        return Image.frombytes("I", size, values.astype("<i4").tobytes())
    if mode == "F":
        frac = rgb[..., 1].astype(np.float32) / 256.0
        values = lum.astype(np.float32) * np.float32(1.5) - np.float32(64.0) + frac
        return Image.frombytes("F", size, values.astype("<f4").tobytes())
    if mode in ("LAB", "YCbCr"):
        return Image.frombytes(mode, size, rgb.tobytes())
    raise ValueError(f"unknown mode {mode!r}")  # pragma: no cover - CaseParams validates


def images_equal(a: Image.Image, b: Image.Image) -> bool:
    """Same mode, size, bytes, palette and transparency (what decides the checkpoint's output)."""
    if a.mode != b.mode or a.size != b.size or a.tobytes() != b.tobytes():
        return False
    if a.mode in ("P", "PA") and a.getpalette() != b.getpalette():
        return False
    return _transparency(a) == _transparency(b)


def _transparency(img: Image.Image) -> Any:
    value = img.info.get("transparency")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).rstrip(b"\xff")  # PNG may trim trailing opaque entries
    return value
