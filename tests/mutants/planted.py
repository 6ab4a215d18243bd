"""Planted-bug candidates, each modelled on a real failure class of preprocessing kernels.

`Pipeline` is a plain re-implementation of the checkpoint's steps, one overridable method per
step (plan, resize, fill, pad, normalize, patchify, grid, combine); it must fuzz clean. Every
mutant overrides exactly one step with a bug. `MUTANTS` lists them with the check the oracle
must name and the tolerance they are fuzzed under. Usable from the CLI too:

    kimi-oracle fuzz --candidate tests/mutants/planted.py:plan_round --examples 300
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.images import encoded_bytes, has_alpha
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.inputs.params import CaseParams
from kimi_oracle.pipelines.reference import background, composite, normalization_lut


class Pipeline:
    """The checkpoint's preprocessing, step by step (correct: the base of every mutant)."""

    def __init__(self, config: PreprocessConfig):
        self.config = config

    # geometry -------------------------------------------------------------------------------
    def plan(self, img: Image.Image) -> ResizePlan:
        return plan(img.width, img.height, self.config)

    # pixels ---------------------------------------------------------------------------------
    def resize(self, img: Image.Image, p: ResizePlan) -> Image.Image:
        return img.resize((p.new_w, p.new_h), Image.Resampling.BICUBIC)

    def bg(self):
        return self.config.transparent_bg_config

    def fill(self, img: Image.Image) -> np.ndarray:
        bg = self.bg()
        if bg is None:
            return np.asarray(img.convert("RGB"))
        if img.mode == "RGB":
            return np.asarray(img)
        if not has_alpha(img):
            return np.asarray(img.convert("RGB"))
        return composite(np.asarray(img.convert("RGBA")), bg)

    def stage(self) -> str:
        return self.config.fill_stage

    def resized_rgb(self, img: Image.Image, p: ResizePlan) -> np.ndarray:
        if self.stage() == "before_resize":
            rgb = Image.fromarray(np.ascontiguousarray(self.fill(img)), "RGB")
            return np.asarray(self.resize(rgb, p))
        return self.fill(self.resize(img, p))

    def pad(self, rgb: np.ndarray, p: ResizePlan) -> np.ndarray:
        out = np.zeros((p.new_h + p.pad_h, p.new_w + p.pad_w, 3), dtype=np.uint8)
        out[: p.new_h, : p.new_w] = rgb
        return out

    def normalize(self, padded: np.ndarray) -> np.ndarray:
        lut = normalization_lut(self.config)
        return np.stack([lut[c][padded[..., c]] for c in range(3)], axis=-1)

    def patchify(self, values: np.ndarray) -> torch.Tensor:
        ps = self.config.patch_size
        hp, wp, _ = values.shape
        gh, gw = hp // ps, wp // ps
        tiles = values.reshape(gh, ps, gw, ps, 3).transpose(0, 2, 4, 1, 3)
        return torch.from_numpy(np.ascontiguousarray(tiles).reshape(gh * gw, 3, ps, ps))

    def grid(self, values: np.ndarray) -> tuple[int, int, int]:
        # From the produced array, never from the plan.
        ps = self.config.patch_size
        return (1, values.shape[0] // ps, values.shape[1] // ps)

    def one(self, img: Image.Image) -> tuple[torch.Tensor, tuple[int, int, int]]:
        p = self.plan(img)
        values = self.normalize(self.pad(self.resized_rgb(img, p), p))
        return self.patchify(values), self.grid(values)

    def combine(self, parts: list[tuple[torch.Tensor, tuple[int, int, int]]]) -> PreprocessResult:
        return PreprocessResult(torch.cat([t for t, _ in parts], dim=0),
                                torch.tensor([g for _, g in parts], dtype=torch.int64))

    def run(self, images: list[Image.Image]) -> PreprocessResult:
        return self.combine([self.one(img) for img in images])


def correct(images: list[Image.Image], config: PreprocessConfig) -> PreprocessResult:
    """The un-mutated pipeline (must fuzz clean)."""
    return Pipeline(config).run(images)


# ------------------------------------------------------------------------------------------
# mutants


class PlanRound(Pipeline):
    """round() instead of int() for the new size in the plan."""

    def plan(self, img: Image.Image) -> ResizePlan:
        c = self.config
        w, h, p, side = img.width, img.height, c.patch_size, c.patch_limit_on_one_side
        s1 = math.sqrt(c.in_patch_limit / (max(1.0, w // p) * max(1.0, h // p)))
        scale = min(1.0, s1, side * p / w, side * p / h)
        new_w = min(max(1, round(w * scale)), side * p)
        new_h = min(max(1, round(h * scale)), side * p)
        f = c.factor
        pad_w, pad_h = (f - new_w % f) % f, (f - new_h % f) % f
        grid = (1, (new_h + pad_h) // p, (new_w + pad_w) // p)
        return ResizePlan(new_w, new_h, pad_w, pad_h, grid, (new_h + pad_h) // f * ((new_w + pad_w) // f))


class PadTopLeft(Pipeline):
    """Padding on the top and left instead of the bottom and right."""

    def pad(self, rgb: np.ndarray, p: ResizePlan) -> np.ndarray:
        out = np.zeros((p.new_h + p.pad_h, p.new_w + p.pad_w, 3), dtype=np.uint8)
        out[p.pad_h :, p.pad_w :] = rgb
        return out


def _torch_resize(img: Image.Image, p: ResizePlan, *, antialias: bool, a: float | None = None) -> Image.Image:
    if img.size == (p.new_w, p.new_h):
        return img.copy()  # as Pillow: no resampling, no conversion
    mode = "RGBA" if has_alpha(img) else "RGB"
    src = img.convert(mode)
    x = torch.from_numpy(np.asarray(src).copy()).permute(2, 0, 1)[None].float()
    y = F.interpolate(x, size=(p.new_h, p.new_w), mode="bicubic", align_corners=False, antialias=antialias)
    out = torch.round(y).clamp(0, 255).to(torch.uint8)[0].permute(1, 2, 0).numpy()
    return Image.fromarray(np.ascontiguousarray(out), mode)


class NoAntialias(Pipeline):
    """torch bicubic without antialias (a = -0.75) instead of Pillow's resampling."""

    def resize(self, img: Image.Image, p: ResizePlan) -> Image.Image:
        return _torch_resize(img, p, antialias=False)


class StraightAlpha(Pipeline):
    """RGBA / LA resized with straight (not premultiplied) alpha: hidden colour bleeds."""

    def resize(self, img: Image.Image, p: ResizePlan) -> Image.Image:
        if img.mode not in ("RGBA", "LA") or img.size == (p.new_w, p.new_h):
            return super().resize(img, p)
        bands = [b.resize((p.new_w, p.new_h), Image.Resampling.BICUBIC) for b in img.split()]
        return Image.merge(img.mode, bands)


class FillBeforeResize(Pipeline):
    """Background composited before the resize even when the config says after."""

    def stage(self) -> str:
        return "before_resize"


class ChessboardFlipped(Pipeline):
    """Chessboard phase flipped (gray square in the other corner)."""

    def bg(self):
        bg = self.config.transparent_bg_config
        if bg is None or bg.pattern != "chessboard":
            return bg
        return dataclasses.replace(bg, chessboard_square_on_top_left=not bg.chessboard_square_on_top_left)


class BgInPadding(Pipeline):
    """The padding filled with the background instead of zeros."""

    def pad(self, rgb: np.ndarray, p: ResizePlan) -> np.ndarray:
        bg = self.config.transparent_bg_config
        if bg is None:
            return super().pad(rgb, p)
        out = background(bg, p.new_h + p.pad_h, p.new_w + p.pad_w).copy()
        out[: p.new_h, : p.new_w] = rgb
        return out


class FloatNormalization(Pipeline):
    """float32 x * (1 / (255 std)) + (-mean / std) instead of the checkpoint's table (1 ulp off)."""

    def normalize(self, padded: np.ndarray) -> np.ndarray:
        mean = torch.tensor(self.config.image_mean, dtype=torch.float32)
        std = torch.tensor(self.config.image_std, dtype=torch.float32)
        x = torch.from_numpy(padded.copy()).float()
        return (x * (1.0 / (255.0 * std)) + (-mean / std)).numpy()


class ChannelsLast(Pipeline):
    """Patches cut as (p, p, C) and reinterpreted as (C, p, p)."""

    def patchify(self, values: np.ndarray) -> torch.Tensor:
        ps = self.config.patch_size
        hp, wp, _ = values.shape
        gh, gw = hp // ps, wp // ps
        tiles = values.reshape(gh, ps, gw, ps, 3).transpose(0, 2, 1, 3, 4)
        return torch.from_numpy(np.ascontiguousarray(tiles).reshape(gh * gw, 3, ps, ps))


class DropPatchRow(Pipeline):
    """The last patch row of the batch dropped (an off-by-one in the output allocation)."""

    def combine(self, parts):
        out = super().combine(parts)
        return PreprocessResult(out.pixel_values[:-1], out.grid_thws)


class WrongPatchGrid(Pipeline):
    """Grid computed with the vision tower's patch size (16) instead of the processor's (14)."""

    def grid(self, values: np.ndarray) -> tuple[int, int, int]:
        return (1, values.shape[0] // 16, values.shape[1] // 16)


class ChunkLocalGrids(Pipeline):
    """Images processed in chunks of two whose local positions index the global grid table."""

    def combine(self, parts):
        out = super().combine(parts)
        grids = out.grid_thws.clone()
        for i in range(len(parts)):
            grids[i] = out.grid_thws[i % 2]
        return PreprocessResult(out.pixel_values, grids)


class PaletteBicubic(Pipeline):
    """"P" and "1" images converted to RGB and resized bicubic instead of NEAREST."""

    def resize(self, img: Image.Image, p: ResizePlan) -> Image.Image:
        if img.mode in ("P", "1") and img.size != (p.new_w, p.new_h):
            img = img.convert("RGBA" if has_alpha(img) else "RGB")
        return super().resize(img, p)


class GridInt32(Pipeline):
    """grid_thws returned as int32."""

    def combine(self, parts):
        out = super().combine(parts)
        return PreprocessResult(out.pixel_values, out.grid_thws.to(torch.int32))


class CrashOnThin(Pipeline):
    """Raises on images with a side of 1 or 2 pixels (a kernel assuming at least 3 taps)."""

    def one(self, img):
        if min(img.size) < 3:
            raise ValueError(f"kernel needs at least 3 pixels per side, got {img.size}")
        return super().one(img)


class BatchPathFloat(Pipeline):
    """Batches of several images take a float-normalization path; single images the table.

    Within 1 ulp, so it passes a `levels:1` comparison: only the batch-vs-single invariance
    (bitwise) sees it."""

    def run(self, images):
        if len(images) > 1:
            self.normalize = FloatNormalization.normalize.__get__(self)  # type: ignore[method-assign]
        return super().run(images)


class Nondeterministic(Pipeline):
    """A race: a random value in every run is off by one ulp (within any level tolerance)."""

    def combine(self, parts):
        out = super().combine(parts)
        values = out.pixel_values.clone()
        flat = values.view(-1).view(torch.int32)
        index = int.from_bytes(os.urandom(4), "little") % flat.numel()
        flat[index] += 1
        return PreprocessResult(values, out.grid_thws)


class TransparencyKeyIgnored(Pipeline):
    """Only an "A" band counts as transparency: a `transparency` key (P, L, RGB) is ignored."""

    def fill(self, img: Image.Image) -> np.ndarray:
        if "A" not in img.getbands() and "transparency" in img.info:
            with warnings.catch_warnings():  # Pillow's advice to go through RGBA: the bug here
                warnings.simplefilter("ignore", UserWarning)
                return np.asarray(img.convert("RGB"))
        return super().fill(img)


class CompositeRounded(Pipeline):
    """The composite rounded (+0.5, then truncated) instead of truncated."""

    def fill(self, img: Image.Image) -> np.ndarray:
        bg = self.bg()
        if bg is None or img.mode == "RGB" or not has_alpha(img):
            return super().fill(img)
        rgba = np.asarray(img.convert("RGBA"))
        alpha = rgba[..., 3:4].astype(np.float32) / np.float32(255.0)
        back = background(bg, rgba.shape[0], rgba.shape[1])
        return (alpha * rgba[..., :3] + (1 - alpha) * back + np.float32(0.5)).astype(np.uint8)


class ConvertBeforeResize(Pipeline):
    """Every mode but RGB, RGBA, P and 1 converted to RGB (RGBA with transparency) before the
    resize, where the checkpoint resizes CMYK, 16-bit, I, F, LAB, YCbCr, PA... in their own mode."""

    def resize(self, img: Image.Image, p: ResizePlan) -> Image.Image:
        if img.mode not in ("RGB", "RGBA", "P", "1") and img.size != (p.new_w, p.new_h):
            img = img.convert("RGBA" if self.bg() is not None and has_alpha(img) else "RGB")
        return super().resize(img, p)


class ChessboardGrayDefault(Pipeline):
    """The chessboard's grey squares at the dataclass default (200), the config's value unread."""

    def bg(self):
        bg = self.config.transparent_bg_config
        if bg is None or bg.pattern != "chessboard":
            return bg
        return dataclasses.replace(bg, chessboard_gray_value=200)


# Requests (inputs.requests): what an engine does to the decoded file before preprocessing.
# Written here from Pillow's documentation, independently of oracle.diagnosis' variants.


class ExifTranspose(Pipeline):
    """The EXIF orientation applied first (ImageOps.exif_transpose), as vLLM's normalize_image."""

    def one(self, img):
        return super().one(ImageOps.exif_transpose(img))


class LastFrame(Pipeline):
    """The last frame of an animation taken instead of the first."""

    def one(self, img):
        frames = getattr(img, "n_frames", 1)
        if frames > 1:
            img.seek(frames - 1)
            last = img.copy()
            img.seek(0)  # as found: the caller's image stays on its first frame
            img = last
        return super().one(img)


class FlattenWhite(Pipeline):
    """Anything transparent pasted onto white before the resize (vLLM's rgba_to_rgb), whatever the
    config's background and fill stage say."""

    def one(self, img):
        if has_alpha(img):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                rgba = img.convert("RGBA")
            flat = Image.new("RGB", img.size, (255, 255, 255))
            flat.paste(rgba, mask=rgba.split()[3])
            img = flat
        return super().one(img)


class JpegOwnColourConversion(Pipeline):
    """JPEG files decoded to YCbCr and converted to RGB by Pillow's formula instead of libjpeg's
    (another decoder: up to one level off)."""

    def one(self, img):
        data = encoded_bytes(img)
        if data is not None and img.format == "JPEG":
            raw = Image.open(io.BytesIO(data))
            raw.draft("YCbCr", raw.size)
            if raw.mode == "YCbCr":
                img = raw.convert("RGB")
        return super().one(img)


def bytes_correct(files: list, config: PreprocessConfig) -> PreprocessResult:
    """The un-mutated pipeline taking encoded files (decoded with Pillow): must fuzz clean."""
    return Pipeline(config).run([Image.open(io.BytesIO(data)) for data in files])


bytes_correct.kimi_oracle_input = "bytes"  # type: ignore[attr-defined]


def bytes_jpeg_own_colour_conversion(files: list, config: PreprocessConfig) -> PreprocessResult:
    """A bytes-taking candidate with its own JPEG decode (Pillow's YCbCr->RGB formula)."""
    images = []
    for data in files:
        img = Image.open(io.BytesIO(data))
        if img.format == "JPEG":
            img.draft("YCbCr", img.size)
            img = img.convert("RGB") if img.mode == "YCbCr" else img
        images.append(img)
    return Pipeline(config).run(images)


bytes_jpeg_own_colour_conversion.kimi_oracle_input = "bytes"  # type: ignore[attr-defined]


class StraightAlphaFloatNormalization(StraightAlpha, FloatNormalization):
    """Two planted deviations: straight-alpha resize and float normalization."""


@dataclass(frozen=True)
class Mutant:
    """A planted bug: the candidate function, the check that must catch it, the tolerance, and
    the diagnosis ids (kimi_oracle.oracle.diagnosis) its pixel differences were planted to
    carry (empty when it plants no pixel deviation of the catalogue)."""

    name: str
    cls: type
    check: str
    tolerance: str = "exact"
    note: str = ""
    root_causes: tuple[str, ...] = ()
    # With root causes: an input on which its planted deviation shows (its own, and only its
    # own): the images' params and the config (tests/oracle/test_diagnosis.py attributes it).
    case: tuple[tuple[CaseParams, ...], PreprocessConfig] | None = None
    # Other checks that rightly catch it on some inputs (an EXIF rotation of a non-square image
    # changes its grid: a grid mismatch, met first when the fuzzer stops at its first failure).
    also: tuple[str, ...] = ()

    def __call__(self, images: list[Image.Image], config: PreprocessConfig) -> Any:
        return self.cls(config).run(images)


K3 = PreprocessConfig.k3()  # chessboard 8, grey 180, fill after the resize
# 61x45 has 4 x 3 = 12 floored patches: a budget of 6 makes it resample (to 43x31).
K3_RESIZING = dataclasses.replace(K3, in_patch_limit=6)


def _noise(mode: str = "RGB", w: int = 61, h: int = 45, alpha: str = "opaque", seed: int = 1) -> CaseParams:
    return CaseParams(w, h, mode, alpha, "noise", seed)


MUTANTS = [
    Mutant("plan_round", PlanRound, "pixel_mismatch", note="round() in the plan"),
    Mutant("pad_top_left", PadTopLeft, "pixel_mismatch", note="padding on the wrong side", root_causes=("pad",),
           case=((_noise(w=30, h=30),), K3)),
    Mutant("no_antialias", NoAntialias, "pixel_mismatch", note="bicubic without antialias",
           root_causes=("resample-float",), case=((_noise(),), K3_RESIZING)),
    Mutant("straight_alpha", StraightAlpha, "pixel_mismatch", note="straight-alpha resize",
           root_causes=("alpha-straight",), case=((_noise("RGBA", alpha="random"),), K3_RESIZING)),
    Mutant("fill_before_resize", FillBeforeResize, "pixel_mismatch", note="fill stage ignored",
           root_causes=("fill-stage",), case=((_noise("RGBA", alpha="random"),), K3_RESIZING)),
    Mutant("chessboard_flipped", ChessboardFlipped, "pixel_mismatch", note="chessboard phase flipped",
           root_causes=("background",), case=((_noise("RGBA", 40, 40, "transparent"),), K3)),
    Mutant("bg_in_padding", BgInPadding, "pixel_mismatch", note="background colour in the padding",
           root_causes=("pad",), case=((_noise(w=30, h=30),), K3)),
    Mutant("float_normalization", FloatNormalization, "pixel_mismatch", note="float math, not the table",
           root_causes=("normalize-float",), case=((_noise(w=28, h=28),), K3)),
    Mutant("channels_last", ChannelsLast, "pixel_mismatch", note="patchify with channels last",
           root_causes=("patch-order",), case=((_noise(w=28, h=28),), K3)),
    Mutant("drop_patch_row", DropPatchRow, "feature_length", note="one patch row dropped"),
    Mutant("wrong_patch_grid", WrongPatchGrid, "grid_mismatch", note="grid with patch size 16"),
    Mutant("chunk_local_grids", ChunkLocalGrids, "grid_mismatch", note="local positions index the grid table"),
    Mutant("palette_bicubic", PaletteBicubic, "pixel_mismatch", note="P/1 resized bicubic",
           root_causes=("palette-bicubic",), case=((_noise("P"),), K3_RESIZING)),
    Mutant("grid_int32", GridInt32, "shape_dtype", note="int32 grids"),
    Mutant("crash_on_thin", CrashOnThin, "crash", note="raises on 1-2 px sides"),
    Mutant("batch_path_float", BatchPathFloat, "invariance", "levels:1", note="batched path differs by 1 ulp",
           root_causes=("normalize-float",), case=((_noise(w=28, h=28), _noise("L", 20, 30)), K3)),
    Mutant("nondeterministic", Nondeterministic, "invariance", "levels:1", note="1 ulp race"),
    Mutant("transparency_key_ignored", TransparencyKeyIgnored, "pixel_mismatch", note="transparency key ignored",
           root_causes=("transparency-key",), case=((_noise("P", 28, 28, "key"),), K3)),
    Mutant("composite_rounded", CompositeRounded, "pixel_mismatch", note="composite rounded, not truncated",
           root_causes=("composite-rounding",), case=((_noise("RGBA", 28, 28, "random"),), K3)),
    Mutant("convert_before_resize", ConvertBeforeResize, "pixel_mismatch", note="CMYK/16-bit/... converted first",
           root_causes=("convert-before-resize",), case=((_noise("CMYK"),), K3_RESIZING)),
    Mutant("chessboard_gray_default", ChessboardGrayDefault, "pixel_mismatch", note="grey squares at 200",
           root_causes=("background",), case=((_noise("RGBA", 40, 40, "transparent"),), K3)),
    Mutant("straight_alpha_float_normalization", StraightAlphaFloatNormalization, "pixel_mismatch",
           note="two deviations", root_causes=("alpha-straight", "normalize-float"),
           case=((_noise("RGBA", alpha="random"),), K3_RESIZING)),
    # Orientations 2-4 (and any orientation of a square image) are pixel findings named
    # exif-orientation; a transposing orientation (5-8) of a non-square image changes the grid: a
    # grid_mismatch, which has no root cause (only pixel findings are attributed).
    Mutant("exif_transpose", ExifTranspose, "pixel_mismatch", note="EXIF orientation applied",
           root_causes=("exif-orientation",), also=("grid_mismatch",),
           case=((CaseParams(40, 40, container="png", orientation=6),
                  CaseParams(40, 30, container="jpeg", orientation=3)), K3_RESIZING)),
    Mutant("last_frame", LastFrame, "pixel_mismatch", note="last frame of an animation",
           root_causes=("animation-frame",),
           case=((CaseParams(40, 30, "P", container="gif", frames=3, disposal=2),), K3_RESIZING)),
    Mutant("flatten_white", FlattenWhite, "pixel_mismatch", note="transparency pasted onto white first",
           root_causes=("flatten-white",), case=((_noise("RGBA", alpha="random"),), K3_RESIZING)),
    Mutant("jpeg_own_colour_conversion", JpegOwnColourConversion, "pixel_mismatch",
           note="JPEG decoded with another YCbCr->RGB", root_causes=("decoder",),
           case=((CaseParams(40, 30, container="jpeg-progressive"),), K3_RESIZING)),
]
# Mutants that can only be told apart on request-shaped inputs (files, EXIF, animations).
REQUEST_MUTANTS = ("exif_transpose", "last_frame", "jpeg_own_colour_conversion")
BY_NAME = {m.name: m for m in MUTANTS}

# Module-level functions, so each mutant is a `tests/mutants/planted.py:<name>` candidate spec.
for _m in MUTANTS:
    globals()[_m.name] = _m
