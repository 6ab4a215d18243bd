"""Rows of a Pillow image's pixels as NumPy arrays, a band at a time, without a copy of the whole image.

`np.asarray(img)` is `img.tobytes()`: Pillow's raw encoder packs the image in 64 KiB chunks,
which are then joined into one new bytes object the size of the image (fresh memory, written
once more). The fused tail of the reference only reads the pixels band by band, so here the
same encoder packs just the rows of one band (`setimage` with the band's box), and the bytes of
a band are the rows of `np.asarray(img)` exactly: the same encoder, the same raw mode.

`row_reader` falls back to slicing `np.asarray(img)` where the encoder cannot be had or does not
answer as expected (another Pillow), so the bytes are the same on every path. The readers may be
called from several threads at once (each call has its own encoder; the fallback is made once).
"""

from __future__ import annotations

import threading
from typing import Callable, Sequence

import numpy as np
from PIL import Image

__all__ = ["PlaneReader", "RowReader", "plane_reader", "row_reader"]

# rows(y0, y1) -> uint8 (y1 - y0, width, bands): rows y0 to y1 of the image's pixels.
RowReader = Callable[[int, int], np.ndarray]
# planes(y0, y1) -> one uint8 (y1 - y0, width) array per band: the R, G, B (and A) levels of rows y0 to y1.
PlaneReader = Callable[[int, int], Sequence[np.ndarray]]


def _encoded_rows(img: Image.Image, y0: int, y1: int, bands: int, raw: str | None = None) -> np.ndarray | None:
    # Pillow's raw encoder (raw mode `raw`, default the image's mode) over the box
    # (0, y0, width, y1); None if it answers otherwise than with exactly those rows in one call.
    try:
        encoder = Image._getencoder(img.mode, "raw", (raw or img.mode,))
        encoder.setimage(img.im, (0, y0, img.width, y1))
        size = (y1 - y0) * img.width * bands
        _, errcode, data = encoder.encode(max(size, 1))
    except (AttributeError, TypeError, ValueError, OSError):
        return None
    if errcode != 1 or len(data) != size:
        return None
    return np.frombuffer(data, dtype=np.uint8).reshape(y1 - y0, img.width, bands)


def row_reader(img: Image.Image) -> RowReader:
    """Rows of `img` (an "RGB", "RGBA" or "L" image) as uint8 (rows, width, bands) arrays, each
    read when asked for; the same bytes as the rows of `np.asarray(img)`."""
    img.load()
    bands = len(img.getbands())
    if img.mode not in ("RGB", "RGBA", "L") or img.width == 0 or img.height == 0:
        return _sliced(img)
    whole: list[np.ndarray] = []
    lock = threading.Lock()

    def rows(y0: int, y1: int) -> np.ndarray:
        if not whole:
            got = _encoded_rows(img, y0, y1, bands)
            if got is not None:
                return got
            with lock:
                if not whole:
                    whole.append(np.asarray(img).reshape(img.height, img.width, bands))
        return whole[0][y0:y1]

    return rows


def _sliced(img: Image.Image) -> RowReader:
    arr = np.asarray(img)
    arr = arr.reshape(*arr.shape[:2], -1)
    return lambda y0, y1: arr[y0:y1]


def plane_reader(img: Image.Image) -> PlaneReader:
    """The planes of the rows of an "RGB" image (R, G, B) or an "RGBA" one (R, G, B, A), each
    read when asked for by Pillow's raw encoder in the single-band raw modes "R", "G", "B", "A";
    the same bytes as the channels of `np.asarray(img)` (its slices where the encoder answers
    otherwise)."""
    if img.mode not in ("RGB", "RGBA"):
        raise ValueError(f"plane_reader reads RGB and RGBA images, not {img.mode!r}")
    img.load()
    whole: list[np.ndarray] = []
    lock = threading.Lock()

    def planes(y0: int, y1: int) -> Sequence[np.ndarray]:
        if not whole:
            got = [_encoded_rows(img, y0, y1, 1, raw) for raw in img.mode]
            if all(plane is not None for plane in got):
                return [plane[..., 0] for plane in got if plane is not None]
            with lock:
                if not whole:
                    whole.append(np.asarray(img).transpose(2, 0, 1))
        return whole[0][:, y0:y1]

    return planes
