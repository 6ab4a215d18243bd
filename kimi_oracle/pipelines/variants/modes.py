"""Mode-handling variants: which images are composited, how, on what, and what an engine does
with transparency before the resize.

`convert_*` are `Steps.convert` rules, `blend_*` are `Steps.composite`, `OtherBackground` is a
`Steps.background`, and the flatteners are `Steps.prepare` functions (each leaves an image
without transparency unchanged).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.images import convert, has_alpha
from kimi_oracle.pipelines.reference import PATTERN_VALUES, background, fill_conversion

# ---------------------------------------------------------------------------------------------
# convert: which images count as transparent


def convert_ignoring_key(img: Image.Image, bg: TransparentBgConfig | None) -> str | None:
    """The fill's conversion with a `transparency` key ignored: only an "A" band composites
    (engines that test `"A" in img.getbands()` or `img.mode == "RGBA"`)."""
    if "transparency" in img.info and "A" not in img.getbands():
        return None if img.mode == "RGB" else "RGB"
    return fill_conversion(img, bg)


def convert_honouring_key(img: Image.Image, bg: TransparentBgConfig | None) -> str | None:
    """The fill's conversion with a `transparency` key honoured on RGB images too (engines that
    convert every keyed image to RGBA at decode)."""
    if bg is not None and img.mode == "RGB" and "transparency" in img.info:
        return "RGBA"
    return fill_conversion(img, bg)


# ---------------------------------------------------------------------------------------------
# composite-rounding


def _alpha(rgba: np.ndarray, dtype: type) -> np.ndarray:
    a = rgba[..., 3:4].astype(dtype) / dtype(255.0)
    return a


def blend_rounded(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """float32 composite rounded half to even instead of truncated (`np.rint` / `torch.round`
    before the uint8 cast)."""
    a = _alpha(rgba, np.float32)
    return np.clip(np.rint(a * rgba[..., :3] + (1 - a) * back), 0, 255).astype(np.uint8)


def blend_half_up(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """float32 composite rounded half up (`floor(x + 0.5)`, the CUDA kernels' idiom)."""
    a = _alpha(rgba, np.float32)
    return np.clip(np.floor(a * rgba[..., :3] + (1 - a) * back + np.float32(0.5)), 0, 255).astype(np.uint8)


def blend_float64(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """The composite in float64, truncated (numpy code whose alpha is a float64 array)."""
    a = _alpha(rgba, np.float64)
    return (a * rgba[..., :3] + (1 - a) * back).astype(np.uint8)


def blend_integer_rounded(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """Integer composite (α·c + (255 − α)·b + 127) // 255 (fixed-point kernels with a rounding term)."""
    a = rgba[..., 3:4].astype(np.int32)
    return ((a * rgba[..., :3] + (255 - a) * back.astype(np.int32) + 127) // 255).astype(np.uint8)


def blend_integer_truncated(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """Integer composite (α·c + (255 − α)·b) // 255 (fixed-point kernels without the rounding term)."""
    a = rgba[..., 3:4].astype(np.int32)
    return ((a * rgba[..., :3] + (255 - a) * back.astype(np.int32)) // 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# background


@dataclass(frozen=True)
class OtherBackground:
    """The background step with the config's background replaced by `change(bg)`."""

    name: str
    change: Callable[[TransparentBgConfig], TransparentBgConfig]

    def __call__(self, bg: TransparentBgConfig, height: int, width: int) -> np.ndarray:
        return background(self.change(bg), height, width)


def background_changes(config: PreprocessConfig) -> list[tuple[str, Callable[[TransparentBgConfig], TransparentBgConfig]]]:
    """The other backgrounds engines use, named, as changes of the config's background (none
    without a background): another chessboard phase, square, grey or white value, a solid level."""
    bg = config.transparent_bg_config
    if bg is None:
        return []
    out: list[tuple[str, Callable[[TransparentBgConfig], TransparentBgConfig]]] = []

    def to(**changes: Any) -> Callable[[TransparentBgConfig], TransparentBgConfig]:
        return lambda b: dataclasses.replace(b, **changes)

    default = TransparentBgConfig()
    if bg.pattern == "chessboard":
        out.append(("chessboard-phase-flipped", to(chessboard_square_on_top_left=not bg.chessboard_square_on_top_left)))
        s = bg.chessboard_square_size
        for square in dict.fromkeys((default.chessboard_square_size, 8, 2 * s, s // 2)):
            if square >= 1 and square != s:
                out.append((f"chessboard-square-{square}", to(chessboard_square_size=square)))
        for gray in dict.fromkeys((default.chessboard_gray_value, 180, PATTERN_VALUES["gray"], 192)):
            if gray != bg.chessboard_gray_value:
                out.append((f"chessboard-gray-{gray}", to(chessboard_gray_value=gray)))
        if bg.chessboard_white_value != 255:
            out.append(("chessboard-white-255", to(chessboard_white_value=255)))
    for pattern in ("black", "white", "gray"):
        if pattern != bg.pattern:
            out.append((f"solid-{pattern}", to(pattern=pattern)))
    if bg.pattern != "chessboard":
        out.append(("chessboard-default", lambda b: dataclasses.replace(default, pattern="chessboard")))
        out.append(("chessboard-k3", lambda b: TransparentBgConfig("chessboard", 8, True, 255, 180)))
    return out



def _rgba(img: Image.Image) -> Image.Image:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return convert(img, "RGBA")


def flattened_on_white(img: Image.Image) -> Image.Image:
    """Transparency pasted onto white (`Image.paste` with the alpha as mask; vLLM's rgba_to_rgb)."""
    if not has_alpha(img):
        return img
    rgba = _rgba(img)
    out = Image.new("RGB", img.size, (255, 255, 255))
    out.paste(rgba, mask=rgba.getchannel("A"))
    return out


def alpha_composited_on_white(img: Image.Image) -> Image.Image:
    """Transparency composited onto white with `Image.alpha_composite` (processors that build an
    RGBA white canvas and composite onto it)."""
    if not has_alpha(img):
        return img
    return Image.alpha_composite(Image.new("RGBA", img.size, (255, 255, 255, 255)), _rgba(img)).convert("RGB")



def flattened_on_black(img: Image.Image) -> Image.Image:
    """Transparency pasted onto black (processors that build the canvas with `Image.new("RGB", size)`,
    whose default colour is 0)."""
    if not has_alpha(img):
        return img
    rgba = _rgba(img)
    out = Image.new("RGB", img.size)
    out.paste(rgba, mask=rgba.getchannel("A"))
    return out


def alpha_dropped(img: Image.Image) -> Image.Image:
    """The alpha discarded at decode: `img.convert("RGB")` before anything else (processors
    that call `convert("RGB")` on every input, torchvision's `decode_image(mode=RGB)`)."""
    if not has_alpha(img):
        return img
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return convert(img, "RGB")

