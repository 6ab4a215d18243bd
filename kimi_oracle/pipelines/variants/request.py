"""Request variants: what an engine does to the decoded file before the checkpoint's steps
(`Steps.prepare`): EXIF orientation, another frame of an animation, another JPEG decoder. Each
function leaves an image it does not apply to unchanged.
"""

from __future__ import annotations

import functools
import io
from typing import Callable

from PIL import Image, ImageOps

from kimi_oracle.core.images import ORIENTATION_TAG, call_copy, encoded_bytes

def exif_orientation(img: Image.Image) -> int:
    """The EXIF Orientation of `img` as Pillow reads it (1 when there is none or it is bad)."""
    try:
        value = img.getexif().get(ORIENTATION_TAG, 1)
    except Exception:  # a damaged EXIF block: as Pillow's exif_transpose, no orientation
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def exif_transposed(img: Image.Image) -> Image.Image:
    """`ImageOps.exif_transpose` (what vLLM's normalize_image applies)."""
    if exif_orientation(img) == 1:
        return img
    return ImageOps.exif_transpose(img)


@functools.lru_cache(maxsize=16)
def frame_taker(k: int) -> Callable[[Image.Image], Image.Image]:
    """A function taking frame k of an animation (k < 0 counts from the end) as Pillow seeks to it."""

    def take(img: Image.Image) -> Image.Image:
        n = getattr(img, "n_frames", 1)
        index = k if k >= 0 else n + k
        if n <= 1 or not 0 < index < n:
            return img
        out = call_copy(img)  # seeking a copy: the image the others use stays on frame 0
        out.seek(index)
        return out.copy()

    take.__name__ = f"frame_{k}"
    return take



def is_jpeg(img: Image.Image) -> bool:
    data = encoded_bytes(img)
    return data is not None and data[:3] == b"\xff\xd8\xff"


def jpeg_pillow_ycbcr(img: Image.Image) -> Image.Image:
    """The JPEG decoded to YCbCr by libjpeg and converted to RGB by Pillow's own arithmetic
    (another colour conversion than libjpeg's: up to 1 level on about half the pixels, measured)."""
    if not is_jpeg(img):
        return img
    data = encoded_bytes(img)
    assert data is not None
    raw = Image.open(io.BytesIO(data))
    raw.draft("YCbCr", raw.size)
    if raw.mode != "YCbCr":
        return img
    out = raw.convert("RGB")
    out.info = dict(img.info)
    return out


# Pillow format names whose files are lossy (a decoder of its own may give other pixels).
LOSSY_FORMATS = frozenset({"JPEG", "WEBP", "MPO"})


def lossy_file(img: Image.Image) -> bool:
    """True for an image decoded from a lossy file (JPEG, WebP, MPO)."""
    return encoded_bytes(img) is not None and (img.format or "") in LOSSY_FORMATS

