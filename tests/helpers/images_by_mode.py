"""Small random images of every mode the reference tests cover (built with Pillow directly)."""

from __future__ import annotations

import numpy as np
from PIL import Image

MODES = ["RGB", "RGBA", "LA", "L", "P", "P+transparency", "1", "CMYK", "I;16"]


def make(mode: str, w: int, h: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    if mode == "RGB":
        return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    if mode == "RGBA":
        a = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
        # Many fully transparent and fully opaque pixels, with random hidden colour.
        a[..., 3] = rng.choice(np.array([0, 0, 255, 255, 1, 128, 254], np.uint8), size=(h, w))
        return Image.fromarray(a, "RGBA")
    if mode == "LA":
        a = rng.integers(0, 256, (h, w, 2), dtype=np.uint8)
        a[..., 1] = rng.choice(np.array([0, 255, 7, 200], np.uint8), size=(h, w))
        return Image.fromarray(a, "LA")
    if mode == "L":
        return Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
    if mode in ("P", "P+transparency"):
        img = Image.fromarray(rng.integers(0, 16, (h, w), dtype=np.uint8), "P")
        img.putpalette(rng.integers(0, 256, 16 * 3, dtype=np.uint8).tobytes())
        if mode == "P+transparency":
            img.info["transparency"] = 3
        return img
    if mode == "1":
        return Image.fromarray(rng.integers(0, 2, (h, w), dtype=np.uint8) * 255, "L").convert("1")
    if mode == "CMYK":
        return Image.frombytes("CMYK", (w, h), rng.integers(0, 256, (h, w, 4), dtype=np.uint8).tobytes())
    if mode == "I;16":
        data = rng.integers(0, 600, (h, w), dtype=np.uint16).astype("<u2").tobytes()
        return Image.frombytes("I;16", (w, h), data)
    raise ValueError(mode)
