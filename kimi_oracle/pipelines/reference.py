"""The CPU reference: what the checkpoint processor computes, with Pillow doing the resize (spec §3).

The pipeline is a short sequence of named steps, per image:

    stage     where the background fill happens (the config's `transparent_bg_fill_stage`)
    resize    Pillow's `resize(BICUBIC)` in the image's own mode (Pillow's rules: NEAREST for
              "1"/"P", premultiplied alpha for "RGBA"/"LA", each mode's own arithmetic)
    convert   what the fill turns the image into: kept RGB, plain RGB, or RGBA to composite
    composite the float32 alpha blend on the `background`, truncated to uint8
    pad       zeros at the bottom and right, to the multiple of merge × patch
    normalize the checkpoint's float32 normalization (a 3 × 256 table)
    patchify  (gh·gw, C, p, p), patch index gy·gw + gx

`Steps()` (= `CHECKPOINT`) is exactly the checkpoint. The diagnosis replaces single steps with
the way other engines do them (`kimi_oracle.oracle.diagnosis`); the checkpoint's own path stays
the fused fast one (pad + normalize + patchify in one table lookup).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.images import PREMULTIPLIED_MODES, ImageSource, convert, has_alpha, load_images
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.pipelines import fused, pixels

__all__ = [
    "CHECKPOINT",
    "EIGHT_BIT_MODES",
    "PATTERN_VALUES",
    "PreprocessResult",
    "Steps",
    "background",
    "blend",
    "composite",
    "fill",
    "fill_conversion",
    "normalization_lut",
    "pad_bottom_right",
    "patches_chw",
    "patchify",
    "pillow_resample",
    "preprocess",
    "preprocess_image",
    "resize",
]

PATTERN_VALUES = {"white": 255, "black": 0, "gray": 128}

# Modes with 8 bits per band that Pillow resamples band by band, each band like an "L" image,
# with its 8-bit fixed-point bicubic. The others keep Pillow's own path in every variant of the
# pipeline: "1" and "P" (NEAREST), "PA", "LAB" (its a and b bands are resampled as signed
# values), the 16- and 32-bit modes.
EIGHT_BIT_MODES = frozenset({"L", "LA", "La", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "HSV"})


# ---------------------------------------------------------------------------------------------
# normalize


@functools.lru_cache(maxsize=64)
def _lut(mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    # The checkpoint's in-place float32 normalization of a uint8 HWC array, applied to every
    # possible uint8 value: each step computes in float64 (mean, 1/std are float64 arrays)
    # and stores float32.
    u8 = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1)
    x = (u8 / 255.0).astype(np.float32)
    x -= np.array(mean)
    x *= 1.0 / np.array(std)
    lut = np.ascontiguousarray(x.T)
    lut.setflags(write=False)
    return lut


def normalization_lut(config: PreprocessConfig) -> np.ndarray:
    """float32 (3, 256): entry [c, v] is the checkpoint's normalized value of level v in channel c."""
    return _lut(tuple(config.image_mean), tuple(config.image_std))


# ---------------------------------------------------------------------------------------------
# background and composite


def background(bg: TransparentBgConfig, height: int, width: int) -> np.ndarray:
    """The uint8 (height, width, 3) background the checkpoint composites transparent pixels on."""
    if bg.pattern in PATTERN_VALUES:
        return np.full((height, width, 3), PATTERN_VALUES[bg.pattern], dtype=np.uint8)
    square = bg.chessboard_square_size
    ys = (np.arange(height) // square)[:, None]
    xs = (np.arange(width) // square)[None, :]
    gray_parity = 1 if bg.chessboard_square_on_top_left else 0
    gray = ((ys + xs) % 2) == gray_parity
    out = np.full((height, width, 3), bg.chessboard_white_value, dtype=np.uint8)
    out[gray] = bg.chessboard_gray_value
    return out


def blend(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """The checkpoint's composite arithmetic: float32 `α·rgb + (1 − α)·back`, truncated to uint8."""
    alpha = rgba[..., 3].astype(np.float32) / 255.0
    alpha = np.stack([alpha, alpha, alpha], axis=-1)
    return (alpha * rgba[..., :3] + (1 - alpha) * back).astype(np.uint8)


def composite(rgba: np.ndarray, bg: TransparentBgConfig) -> np.ndarray:
    """The checkpoint's float32 alpha composite of a uint8 (h, w, 4) array: uint8 (h, w, 3)."""
    h, w = rgba.shape[:2]
    return blend(rgba, background(bg, h, w))


# ---------------------------------------------------------------------------------------------
# convert


def _convert(img: Image.Image, mode: str) -> Image.Image:
    try:
        with warnings.catch_warnings():
            # Pillow's advice to convert palette images with byte transparency to RGBA: that is
            # what the checkpoint does next anyway; the warning only adds noise to reports.
            warnings.filterwarnings("ignore", message="Palette images with Transparency", category=UserWarning)
            return convert(img, mode)
    except (ValueError, OSError) as exc:
        raise InputError(f"mode {img.mode!r}: the checkpoint's conversion to {mode} fails: {exc}") from None


def fill_conversion(img: Image.Image, bg: TransparentBgConfig | None) -> str | None:
    """What the checkpoint's fill does to this image: None (already RGB, kept), "RGB" (a plain
    conversion) or "RGBA" (conversion to RGBA, then the composite on the background)."""
    # convert("RGB") of an RGB image is an identical copy: the checkpoint's bg=None branch
    # converts, its RGB branch returns the image unchanged; the bytes are the same.
    if img.mode == "RGB":
        return None
    if bg is None or not has_alpha(img):
        return "RGB"
    return "RGBA"


def _background_levels(bg: TransparentBgConfig, width: int):
    # `background` as levels and a per-pixel choice among them (fused.composite_planes).
    if bg.pattern in PATTERN_VALUES:
        return (PATTERN_VALUES[bg.pattern],), lambda y0, y1: None
    square = bg.chessboard_square_size
    xs = np.arange(width) // square
    gray_parity = 1 if bg.chessboard_square_on_top_left else 0
    # The choice along a row of squares of each parity: level 1 (gray) where `background`'s
    # square parity is the gray one.
    rows = np.stack([((r + xs) % 2) == gray_parity for r in (0, 1)]).astype(np.uint8)

    def which(y0: int, y1: int) -> np.ndarray:
        return rows[(np.arange(y0, y1) // square) % 2]

    return (bg.chessboard_white_value, bg.chessboard_gray_value), which


def _fill_array(img: Image.Image, bg: TransparentBgConfig | None) -> np.ndarray:
    # The checkpoint's fill as a uint8 (h, w, 3) array; a composite comes back as a view of
    # channel planes (3, h, w), which `patchify` reads as planes.
    kind = fill_conversion(img, bg)
    if kind is None:
        return np.asarray(img)
    if kind == "RGB":
        return np.asarray(_convert(img, "RGB"))
    assert bg is not None
    rgba = np.asarray(img if img.mode == "RGBA" else _convert(img, "RGBA"))
    if not fused.LITTLE_ENDIAN:
        return composite(rgba, bg)
    levels, which = _background_levels(bg, rgba.shape[1])
    return fused.composite_planes(rgba, levels, which, blend).transpose(1, 2, 0)


def fill(img: Image.Image, bg: TransparentBgConfig | None) -> Image.Image:
    """The checkpoint's background fill; the result is always an RGB image."""
    kind = fill_conversion(img, bg)
    if kind is None:
        return img
    if kind == "RGB":
        return _convert(img, "RGB")
    planes = _fill_array(img, bg).transpose(2, 0, 1)
    return Image.merge("RGB", [Image.fromarray(np.ascontiguousarray(plane), mode="L") for plane in planes])


# ---------------------------------------------------------------------------------------------
# resize


def resize(img: Image.Image, size: tuple[int, int]) -> Image.Image:
    """The checkpoint's resize: `img.resize(size, BICUBIC)` with Pillow's rules for the mode."""
    try:
        return img.resize(size, Image.Resampling.BICUBIC)
    except (ValueError, OSError) as exc:
        raise InputError(f"mode {img.mode!r}: Pillow cannot resize it: {exc}") from None


def pillow_resample(arr: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Pillow's 8-bit bicubic of a uint8 (h, w, c) array to `size` (w, h), band by band."""
    bands = [Image.frombytes("L", (arr.shape[1], arr.shape[0]), np.ascontiguousarray(arr[..., c]).tobytes())
             .resize(size, Image.Resampling.BICUBIC) for c in range(arr.shape[2])]
    return np.stack([np.asarray(b) for b in bands], axis=-1)


def _resize_by_parts(img: Image.Image, size: tuple[int, int], steps: "Steps") -> Image.Image:
    # Pillow's dispatch, with the 8-bit resampler and the alpha handling taken from `steps`.
    if img.size == size:
        return img.copy()
    if img.mode not in EIGHT_BIT_MODES:
        return resize(img, size)
    premultiply = img.mode in PREMULTIPLIED_MODES and not steps.straight_alpha
    src = _convert(img, PREMULTIPLIED_MODES[img.mode]) if premultiply else img
    arr = np.asarray(src)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    out = np.asarray(steps.resample(arr, size), dtype=np.uint8)
    raw = out[:, :, 0] if len(src.getbands()) == 1 else out
    res = Image.frombytes(src.mode, size, np.ascontiguousarray(raw).tobytes())
    if premultiply:
        res = _convert(res, img.mode)
    res.info.update(img.info)  # as Image.resize: the transparency key stays
    return res


# ---------------------------------------------------------------------------------------------
# pad, normalize, patchify


def pad_bottom_right(values: np.ndarray, p: ResizePlan, normalized: Callable[[np.ndarray], np.ndarray],
                     back: Callable[[int, int], np.ndarray | None]) -> np.ndarray:
    """The checkpoint's padding of normalized (h, w, 3) values: level 0 at the bottom and right."""
    hp, wp = p.new_h + p.pad_h, p.new_w + p.pad_w
    out = np.empty((hp, wp, 3), dtype=np.float32)
    out[...] = normalized(np.zeros((1, 1, 3), dtype=np.uint8))[0, 0]
    out[: p.new_h, : p.new_w] = values
    return out


def patches_chw(values: np.ndarray, patch: int) -> torch.Tensor:
    """The checkpoint's patchify of (hp, wp, 3) values: (gh·gw, C, p, p), patch gy·gw + gx."""
    hp, wp, _ = values.shape
    gh, gw = hp // patch, wp // patch
    tiles = values.reshape(gh, patch, gw, patch, 3).transpose(0, 2, 4, 1, 3)
    return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))


def patchify(rgb: np.ndarray, config: PreprocessConfig, p: ResizePlan, lut: np.ndarray | None = None) -> torch.Tensor:
    """Pad a uint8 (h, w, 3) array, normalize it through the LUT and cut it into patches.

    The fused form of the checkpoint's pad, normalize and patchify steps; `lut` replaces the
    checkpoint's table (`normalization_lut(config)`) when given."""
    ps = config.patch_size
    hp, wp = p.new_h + p.pad_h, p.new_w + p.pad_w
    if rgb.shape != (p.new_h, p.new_w, 3):
        raise InputError(f"internal: resized array has shape {rgb.shape}, plan expects {(p.new_h, p.new_w, 3)}")
    if lut is None:
        lut = normalization_lut(config)
    if rgb.dtype != np.uint8:  # (a variant's array of levels in another integer type)
        rgb = rgb.astype(np.uint8)
    if rgb.strides[1] == 1 and rgb.strides[2] > 1:  # channel planes (a composite)
        return torch.from_numpy(fused.patches_from_planes(rgb.transpose(2, 0, 1), hp, wp, ps, lut))
    return torch.from_numpy(fused.patches_from_hwc(rgb, hp, wp, ps, lut))


# ---------------------------------------------------------------------------------------------
# the steps


Resample = Callable[[np.ndarray, tuple[int, int]], np.ndarray]
Conversion = Callable[[Image.Image, "TransparentBgConfig | None"], "str | None"]
BackgroundStep = Callable[[TransparentBgConfig, int, int], np.ndarray]
CompositeStep = Callable[[np.ndarray, np.ndarray], np.ndarray]
PadStep = Callable[[np.ndarray, ResizePlan, Callable[[np.ndarray], np.ndarray], Callable[[int, int], "np.ndarray | None"]],
                   np.ndarray]
NormalizeStep = Callable[[PreprocessConfig], np.ndarray]
PatchifyStep = Callable[[np.ndarray, int], torch.Tensor]


@dataclass(frozen=True)
class Steps:
    """The reference as named steps; every default is the checkpoint's own (`CHECKPOINT`).

    stage           None: the config's fill stage; "before_resize" / "after_resize" forces one.
    convert_first   source modes converted (by `convert`'s rule, to RGB or RGBA) before the
                    resize instead of after it.
    resample        the 8-bit resampler, uint8 (h, w, c) → uint8 at size (w, h).
    straight_alpha  RGBA / LA resampled as they are instead of premultiplied.
    convert         the fill's conversion rule (`fill_conversion`: None, "RGB" or "RGBA").
    background      the uint8 background of a given size.
    composite       the blend of a uint8 RGBA array on a background array.
    pad             the padding of normalized (h, w, 3) values to the padded size.
    normalize       the (3, 256) float32 table from uint8 levels to model values.
    patchify        (hp, wp, 3) values → (N, 3, p, p) patches.
    prepare         functions applied in order to the decoded image before anything else (an
                    engine's own input handling: EXIF orientation, another frame, a flatten);
                    the checkpoint's: none.
    """

    stage: str | None = None
    convert_first: frozenset[str] = frozenset()
    resample: Resample = pillow_resample
    straight_alpha: bool = False
    convert: Conversion = fill_conversion
    background: BackgroundStep = background
    composite: CompositeStep = blend
    pad: PadStep = pad_bottom_right
    normalize: NormalizeStep = normalization_lut
    patchify: PatchifyStep = patches_chw
    prepare: tuple[Callable[[Image.Image], Image.Image], ...] = ()

    def prepared(self, img: Image.Image) -> Image.Image:
        """The decoded image after the `prepare` functions (itself when there are none)."""
        for step in self.prepare:
            img = step(img)
        return img

    def replace(self, **changes) -> "Steps":
        """A copy with some steps replaced."""
        return dataclasses.replace(self, **changes)

    # The checkpoint's resize is Pillow's own call; the parts are only taken apart when a
    # variant replaces one of them.
    def _pillow_resizes(self) -> bool:
        return self.resample is pillow_resample and not self.straight_alpha

    def _checkpoint_fill(self) -> bool:
        return self.convert is fill_conversion and self.background is background and self.composite is blend

    def _fill(self, img: Image.Image, bg: TransparentBgConfig | None) -> np.ndarray:
        if self._checkpoint_fill():
            return _fill_array(img, bg)
        kind = self.convert(img, bg)
        if kind is None:
            return np.asarray(img)
        if kind == "RGB":
            return np.asarray(_convert(img, "RGB"))
        assert bg is not None
        rgba = np.asarray(_convert(img, "RGBA"))
        return self.composite(rgba, self.background(bg, rgba.shape[0], rgba.shape[1]))

    def _resized(self, img: Image.Image, config: PreprocessConfig, p: ResizePlan) -> Image.Image:
        # Stage fill (before the resize) and resize: the image `resized_rgb` reads.
        bg = config.transparent_bg_config
        size = (p.new_w, p.new_h)
        if self._filled_before(config):
            if self._checkpoint_fill():
                img = fill(img, bg)
            else:
                img = Image.fromarray(np.ascontiguousarray(self._fill(img, bg)), mode="RGB")
        elif img.mode in self.convert_first and img.size != size:
            kind = self.convert(img, bg)
            if kind is not None:
                img = _convert(img, kind)
        if self._pillow_resizes():
            # Pillow's resize to the same size is a copy of the same bytes: skipped.
            return img if img.size == size else resize(img, size)
        return _resize_by_parts(img, size, self)

    def _filled_before(self, config: PreprocessConfig) -> bool:
        return (self.stage or config.fill_stage) == "before_resize"

    def _rgb(self, resized: Image.Image, config: PreprocessConfig) -> np.ndarray:
        # The resized image as the uint8 (h, w, 3) array of levels: the fill after the resize.
        if self._filled_before(config):
            return np.asarray(resized)
        return self._fill(resized, config.transparent_bg_config)

    def resized_rgb(self, img: Image.Image, config: PreprocessConfig, p: ResizePlan) -> np.ndarray:
        """Stage fill, resize, convert and composite: the uint8 (new_h, new_w, 3) array."""
        return self._rgb(self._resized(img, config, p), config)

    def _fused_tail(self) -> bool:
        return self.pad is pad_bottom_right and self.patchify is patches_chw

    def _read_by_bands(self, resized: Image.Image, config: PreprocessConfig) -> str | None:
        # How the fused tail reads the resized image: "RGB" as it is, "RGBA" composited band by
        # band; None: through `resized_rgb`'s array (a variant's step, or a conversion first).
        if not self._fused_tail():
            return None
        if self._filled_before(config):
            return "RGB" if resized.mode == "RGB" else None
        if not self._checkpoint_fill():
            return None
        kind = fill_conversion(resized, config.transparent_bg_config)
        if kind is None:
            return "RGB"
        return "RGBA" if kind == "RGBA" and fused.LITTLE_ENDIAN else None

    def image_patches(self, img: Image.Image, config: PreprocessConfig, p: ResizePlan, *,
                      threads: int = 1) -> torch.Tensor:
        """`patches(resized_rgb(img))`; on the checkpoint's own fill and tail, the resized image is
        read band by band (`pixels`: the same bytes, no copy of the whole image), an RGB
        image kept as it is, an RGBA one composited band by band, the bands on `threads` threads."""
        resized = self._resized(img, config, p)
        kind = self._read_by_bands(resized, config)
        if kind is None or resized.size != (p.new_w, p.new_h):
            return self.patches(self._rgb(resized, config), config, p)
        shape = (p.new_h, p.new_w, p.new_h + p.pad_h, p.new_w + p.pad_w, config.patch_size, self.normalize(config))
        if (p.new_h + p.pad_h) * (p.new_w + p.pad_w) < BAND_THREADS_MIN_PIXELS:
            threads = 1
        if kind == "RGB":
            planes = pixels.plane_reader(resized)
            return torch.from_numpy(fused.patches_from_plane_rows(planes, *shape, threads=threads))
        bg = config.transparent_bg_config
        assert bg is not None
        rgba = resized if resized.mode == "RGBA" else _convert(resized, "RGBA")
        levels, which = _background_levels(bg, p.new_w)
        return torch.from_numpy(fused.patches_from_composite(pixels.row_reader(rgba), *shape, levels, which, blend,
                                                             threads=threads, planes=pixels.plane_reader(rgba)))

    def patches(self, rgb: np.ndarray, config: PreprocessConfig, p: ResizePlan) -> torch.Tensor:
        """Pad, normalize and patchify a uint8 (new_h, new_w, 3) array."""
        lut = self.normalize(config)
        if self._fused_tail():
            return patchify(rgb, config, p, lut)

        def normalized(u8: np.ndarray) -> np.ndarray:
            return np.stack([lut[c][u8[..., c]] for c in range(3)], axis=-1)

        bg = config.transparent_bg_config

        def back(height: int, width: int) -> np.ndarray | None:
            return None if bg is None else self.background(bg, height, width)

        values = self.pad(normalized(rgb), p, normalized, back)
        return self.patchify(values, config.patch_size)


CHECKPOINT = Steps()


# ---------------------------------------------------------------------------------------------
# the pipeline


def preprocess_image(img: Image.Image, config: PreprocessConfig, *,
                     steps: Steps = CHECKPOINT, threads: int = 1) -> tuple[torch.Tensor, ResizePlan]:
    """Patches (N, 3, p, p) float32 and the plan for one decoded image (its bands after the
    resize on `threads` threads)."""
    img = steps.prepared(img)
    p = plan(img.width, img.height, config)
    return steps.image_patches(img, config, p, threads=threads), p


@functools.lru_cache(maxsize=1)
def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))  # the cores this process may run on
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# An image's bands run on threads from this many padded pixels on: below, the threads' start
# and buffers cost what they save (docs/measurements.md, round 7).
BAND_THREADS_MIN_PIXELS = 4 << 20

# A batch runs on threads from this many source pixels on (below, a thread's start costs more
# than it saves: the fuzzer's small cases stay in the caller's thread).
PARALLEL_MIN_PIXELS = 1 << 20


def preprocess(images: Iterable[ImageSource], config: PreprocessConfig, *,
               steps: Steps = CHECKPOINT, threads: int | None = None) -> PreprocessResult:
    """Run the checkpoint's preprocessing on a batch: concatenated patches and grids.

    The batch runs on `threads` threads (None: one per core, for batches of at least
    `PARALLEL_MIN_PIXELS` source pixels; 1: all in the caller's thread): the images on one thread
    each, and the threads left over (all of them for one image) on the bands of an image after
    its resize, from `BAND_THREADS_MIN_PIXELS` padded pixels on. Pillow and NumPy release the
    GIL in the work of each. The result is the same either way."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise InputError(f"threads must be an integer >= 1, got {threads!r}")
    decoded = load_images(images)
    total = threads or _cores()
    if threads is None and sum(img.width * img.height for img in decoded) < PARALLEL_MIN_PIXELS:
        total = 1
    workers = max(1, min(len(decoded), total))
    bands = max(1, total // workers)

    def one(img: Image.Image) -> tuple[torch.Tensor, ResizePlan]:
        return preprocess_image(img, config, steps=steps, threads=bands)

    if workers <= 1:
        done = [one(img) for img in decoded]
    else:
        for img in decoded:
            img.load()  # a lazily opened image is read here, once, not by two threads
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kimi-reference") as pool:
            done = list(pool.map(one, decoded))
    patches = [values for values, _ in done]
    grids = [p.grid_thw for _, p in done]
    pixel_values = patches[0] if len(patches) == 1 else torch.cat(patches, dim=0)
    return PreprocessResult(pixel_values, torch.tensor(grids, dtype=torch.int64))
