"""Planted step variants of the field (issue 25) and random stacks of two or three of them.

Each class overrides one step of `planted.Pipeline`, written here from the libraries' own
behaviour (Pillow's modes and filters, torch's uint8 interpolate, the float formulas), never from
`kimi_oracle.pipelines.variants`. `STEP_MUTANTS` holds them with the variant (`family/variant`)
each was planted to be named; `stack(rng)` draws a combination of mutants of different steps that
can be told apart on one input, and builds the candidate.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from mutants.planted import (BgInPadding, ChannelsLast, ChessboardFlipped, ChessboardGrayDefault, CompositeRounded,
                             FillBeforeResize, FlattenWhite, FloatNormalization, PadTopLeft, Pipeline, StraightAlpha)
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.images import has_alpha

# Pillow resizes these premultiplied (its own RGBa / La modes).
PREMULTIPLIED = {"RGBA": "RGBa", "LA": "La"}


def _uint8_resize(arr: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    # band by band, each a one-channel uint8 tensor (torch 2.13's 3-channel uint8 kernel fails an
    # assert on 1x1 outputs; one band at a time gives the same bytes as its 3- and 4-channel paths)
    bands = arr if arr.ndim == 3 else arr[:, :, None]
    out = [F.interpolate(torch.from_numpy(np.array(bands[:, :, c]))[None, None], size=(size[1], size[0]),
                         mode="bicubic", antialias=True)[0, 0].numpy() for c in range(bands.shape[2])]
    return np.stack(out, axis=-1) if arr.ndim == 3 else out[0]


class Uint8Antialias(Pipeline):
    """8-bit images (L, LA, RGB, RGBA) resized by torch's uint8 antialiased bicubic, premultiplied
    as Pillow does for RGBA and LA (torchvision's resize on uint8 tensors)."""

    def resize(self, img: Image.Image, p: ResizePlan) -> Image.Image:
        size = (p.new_w, p.new_h)
        if img.mode not in ("L", "LA", "RGB", "RGBA") or img.size == size:
            return super().resize(img, p)
        work = img.convert(PREMULTIPLIED[img.mode]) if img.mode in PREMULTIPLIED else img
        bands = np.stack([np.asarray(b) for b in work.split()], axis=-1)
        out = Image.frombytes(work.mode, size, _uint8_resize(bands, size).tobytes())
        return out.convert(img.mode) if work is not img else out


class BilinearResize(Pipeline):
    """Pillow's BILINEAR instead of BICUBIC (a processor config without `resample`)."""

    def resize(self, img: Image.Image, p: ResizePlan) -> Image.Image:
        return img.resize((p.new_w, p.new_h), Image.Resampling.BILINEAR)


def _stats(config: PreprocessConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.tensor(config.image_mean, dtype=torch.float32), torch.tensor(config.image_std, dtype=torch.float32))


class DivideNormalization(Pipeline):
    """float32 (x/255 − mean)/std: torchvision's to_dtype(scale=True) then normalize."""

    def normalize(self, padded: np.ndarray) -> np.ndarray:
        mean, std = _stats(self.config)
        return ((torch.from_numpy(padded.copy()).float() / 255.0 - mean) / std).numpy()


class Fused255Normalization(Pipeline):
    """float32 (x − 255·mean)/(255·std): the rescale folded into the statistics."""

    def normalize(self, padded: np.ndarray) -> np.ndarray:
        mean, std = _stats(self.config)
        return ((torch.from_numpy(padded.copy()).float() - 255.0 * mean) / (255.0 * std)).numpy()


class Bfloat16Values(Pipeline):
    """The checkpoint's values rounded to bfloat16 (a model input cast early), returned as float32."""

    def normalize(self, padded: np.ndarray) -> np.ndarray:
        return torch.from_numpy(super().normalize(padded)).to(torch.bfloat16).float().numpy()


def _quiet_convert(img, mode):
    # Pillow's `convert` without its advice on palette transparency (a UserWarning).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return img.convert(mode)


class FlattenBlack(Pipeline):
    """Transparency pasted onto a black canvas (`Image.new("RGB", size)`) before the resize."""

    def one(self, img):
        if has_alpha(img):
            rgba = _quiet_convert(img, "RGBA")
            flat = Image.new("RGB", img.size)
            flat.paste(rgba, mask=rgba.split()[3])
            img = flat
        return super().one(img)


class AlphaDropped(Pipeline):
    """`convert("RGB")` on every input first: the alpha discarded, nothing composited."""

    def one(self, img):
        if has_alpha(img):
            img = _quiet_convert(img, "RGB")
        return super().one(img)


@dataclass(frozen=True)
class StepMutant:
    """A planted step variant: its class, the step it overrides, the variant it must be named as."""

    cls: type
    step: str
    variant: str


STEP_MUTANTS = (
    StepMutant(Uint8Antialias, "resize", "resample-float/uint8-aa"),
    StepMutant(BilinearResize, "resize", "resample-float/pillow-bilinear"),
    StepMutant(StraightAlpha, "resize", "alpha-straight/straight-alpha"),
    StepMutant(FloatNormalization, "normalize", "normalize-float/x*scale+bias"),
    StepMutant(DivideNormalization, "normalize", "normalize-float/(x/255-mean)/std"),
    StepMutant(Fused255Normalization, "normalize", "normalize-float/(x-255*mean)/(255*std)"),
    StepMutant(Bfloat16Values, "normalize", "normalize-float/bfloat16"),
    StepMutant(PadTopLeft, "pad", "pad/pad-top-left"),
    StepMutant(BgInPadding, "pad", "pad/pad-background"),
    StepMutant(ChannelsLast, "patchify", "patch-order/channels-last"),
    StepMutant(ChessboardFlipped, "background", "background/chessboard-phase-flipped"),
    StepMutant(ChessboardGrayDefault, "background", "background/chessboard-gray-200"),
    StepMutant(CompositeRounded, "composite", "composite-rounding/round-half-up"),
    StepMutant(FillBeforeResize, "stage", "fill-stage/fill-before_resize"),
    StepMutant(FlattenWhite, "flatten", "flatten-white/paste-on-white"),
    StepMutant(FlattenBlack, "flatten", "flatten-white/paste-on-black"),
    StepMutant(AlphaDropped, "flatten", "alpha-dropped/convert-rgb"),
)
# Steps that cannot both show on one input: nothing is composited once the input is flattened,
# and a straight-alpha resize needs alpha; the background in the padding is the config's (its
# chessboard phase is not the one a background mutant composites).
EXCLUSIVE = ({"flatten", "background"}, {"flatten", "composite"}, {"flatten", "stage"},
             {"flatten", "StraightAlpha"}, {"pad", "background"})


@dataclass
class Stack:
    """A drawn combination: the mutants, the candidate, the variants it must be named as."""

    mutants: tuple[StepMutant, ...]

    @property
    def name(self) -> str:
        return "+".join(m.cls.__name__ for m in self.mutants)

    @property
    def variants(self) -> set[str]:
        return {m.variant for m in self.mutants}

    def __call__(self, images: list[Image.Image], config: PreprocessConfig) -> Any:
        cls = type(self.name, tuple(m.cls for m in self.mutants), {})
        return cls(config).run(images)


def _allowed(steps: set[str]) -> bool:
    return not any(pair <= steps for pair in EXCLUSIVE)


def stack(rng: random.Random) -> Stack:
    """Two or three mutants of different steps that can all show on one RGBA input."""
    while True:
        picked = rng.sample(STEP_MUTANTS, rng.choice((2, 3)))
        steps = {m.step for m in picked}
        if len(steps) == len(picked) and _allowed(steps | {m.cls.__name__ for m in picked}):
            return Stack(tuple(picked))
