"""The catalogue of step families: each root-cause id and the variants engines use for that step.

A family (`RootCause`) is one step of `kimi_oracle.pipelines.reference.Steps` done differently;
its variants (the functions of `kimi_oracle.pipelines.variants`) each swap that step into a
`Steps`. A variant's full name is `family/variant` (`resample-float/uint8-aa`). The ids are
public output (JSON, JUnit, Markdown, the gate's `--known` file); docs/diagnosis.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from PIL import Image

from kimi_oracle.core.config import FILL_STAGES, PreprocessConfig
from kimi_oracle.core.errors import AssumptionError
from kimi_oracle.core.explanation import UNEXPLAINED
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.images import has_alpha
from kimi_oracle.pipelines.reference import CHECKPOINT, EIGHT_BIT_MODES, Steps
from kimi_oracle.pipelines.variants import layout, modes, request
from kimi_oracle.pipelines.variants import normalize as normalizers
from kimi_oracle.pipelines.variants import resample as resamplers

BY_ELIMINATION = "by-elimination"


def _prepared(*functions: Callable[[Image.Image], Image.Image]) -> Callable[[Steps], Steps]:
    return lambda s: s.replace(prepare=s.prepare + functions)


# ---------------------------------------------------------------------------------------------
# the catalogue


@dataclass(frozen=True)
class Variant:
    """One way an engine does a step differently: `apply` swaps it into a `Steps`."""

    name: str
    apply: Callable[[Steps], Steps]


Touches = Callable[[Image.Image, ResizePlan, PreprocessConfig, Steps], bool]


@dataclass(frozen=True)
class RootCause:
    """A named deviation: its id, meaning, variants (per config), and which images it can touch.

    `touches(img, plan, config, steps)` is False only when no variant of this cause can change
    that image's output, whatever other variants `steps` already holds (attribution skips it)."""

    id: str
    meaning: str
    variants: Callable[[PreprocessConfig], Sequence[Variant]]
    touches: Touches
    # Changes what is done to an image (which images are converted or composited, and when), so
    # that a variant of another root cause may only show once this one is applied.
    enabling: bool = False
    reference: str = "checkpoint"  # the name of the checkpoint's own way of doing the step

    def variant(self, config: PreprocessConfig, name: str) -> Variant:
        """The variant called `name` under `config` (KeyError when there is none)."""
        for v in self.variants(config):
            if v.name == name:
                return v
        raise KeyError(f"{self.id}: no variant {name!r} under this config")


def _resized(img: Image.Image, p: ResizePlan) -> bool:
    return img.size != (p.new_w, p.new_h)


def _eight_bit_resize(img: Image.Image, config: PreprocessConfig, steps: Steps) -> bool:
    """False only when the image surely reaches Pillow's own resize of its mode (16- and 32-bit,
    LAB, PA, P, 1 kept in their mode): no 8-bit resampler variant can change it then."""
    return (img.mode in EIGHT_BIT_MODES or img.mode in steps.convert_first or bool(steps.prepare)
            or (steps.stage or config.fill_stage) == "before_resize")


def _composited(img: Image.Image, config: PreprocessConfig) -> bool:
    return config.transparent_bg_config is not None and has_alpha(img)


def _fixed(*variants: Variant) -> Callable[[PreprocessConfig], Sequence[Variant]]:
    return lambda config: variants


def _swapping(step: str, named: Mapping[str, Callable]) -> tuple[Variant, ...]:
    """One variant per name -> function: each puts its function in the `step` field of `Steps`."""
    return tuple(Variant(name, (lambda f: lambda s: s.replace(**{step: f}))(f)) for name, f in named.items())


# The variants that each put another function in one step, by name (the names are public ids).
_NORMALIZERS: dict[str, Callable] = {
    "x*scale+bias": normalizers.NORMALIZE_SCALE_BIAS,
    "addcmul(bias,x,scale)": normalizers.NORMALIZE_FUSED,
    "addcmul(bias,x,scale), float64 constants": normalizers.NORMALIZE_FUSED_FLOAT64_CONSTANTS,
    "(x/255-mean)/std": normalizers.NORMALIZE_DIVIDE,
    "(x/255-mean)*(1/std)": normalizers.NORMALIZE_RECIPROCAL,
    "(x-255*mean)/(255*std)": normalizers.NORMALIZE_FUSED_255,
    "bfloat16": normalizers.NORMALIZE_BFLOAT16,
    "float16": normalizers.NORMALIZE_FLOAT16,
}

_RESAMPLERS: dict[str, Callable] = {
    "torch-bicubic-antialias": resamplers.torch_bicubic_antialias,
    "torch-bicubic": resamplers.torch_bicubic_no_antialias,
    "torch-bicubic-antialias-truncated": resamplers.torch_bicubic_antialias_truncated,
    "torch-bicubic-truncated": resamplers.torch_bicubic_truncated,
    "torch-bicubic-antialias-half-up": resamplers.torch_bicubic_antialias_half_up,
    "uint8-aa": resamplers.torch_uint8_bicubic_antialias,
    "uint8-aa-bilinear": resamplers.torch_uint8_bilinear_antialias,
    "bicubic-a-0.75-antialias": resamplers.bicubic_a075_antialias,
    "pillow-bilinear": resamplers.pillow_bilinear,
    "pillow-nearest": resamplers.pillow_nearest,
    "opencv-area": resamplers.opencv_area,
}

_BLENDS: dict[str, Callable] = {
    "round-half-even": modes.blend_rounded,
    "round-half-up": modes.blend_half_up,
    "integer-rounded": modes.blend_integer_rounded,
    "integer-truncated": modes.blend_integer_truncated,
    "float64": modes.blend_float64,
}

_PADS: dict[str, Callable] = {
    "pad-top-left": layout.pad_top_left,
    "pad-background": layout.pad_background,
    "pad-white": layout.pad_white,
    "pad-after-normalize": layout.pad_after_normalize,
}

_PATCH_ORDERS: dict[str, Callable] = {
    "channels-last": layout.patches_channels_last,
    "patches-column-major": layout.patches_column_major,
    "patch-transposed": layout.patches_transposed,
    "channels-bgr": layout.patches_bgr,
}


def _before_pipeline(cause_id: str, meaning: str, named: Mapping[str, Callable[[Image.Image], Image.Image]],
                     touches: Touches) -> RootCause:
    """A family whose variants change the image before the pipeline (at decode: orientation,
    frame, decoder, alpha): one variant per name -> function, enabling by nature."""
    return RootCause(cause_id, meaning, _fixed(*(Variant(name, _prepared(f)) for name, f in named.items())), touches,
                     enabling=True)


# Modes the checkpoint resizes in their own domain and engines convert first. "P" and "1"
# belong to palette-bicubic, "RGBA" needs no conversion.
CONVERTED_FIRST = frozenset(Image.MODES) - {"P", "1", "RGBA", "RGBa", "La"}
ALL_MODES = frozenset(Image.MODES)
# Modes whose conversion to RGB commutes with the resize (unless a transparency key is set).
_COMMUTING = frozenset({"RGB", "L", "LA"})


def _other_stage(config: PreprocessConfig) -> str:
    return next(s for s in FILL_STAGES if s != config.fill_stage)


def _fill_stage_variants(config: PreprocessConfig) -> tuple[Variant, ...]:
    other = _other_stage(config)
    out = [Variant(f"fill-{other}", lambda s: s.replace(stage=other))]
    if other == "after_resize":
        # As engines that decode to RGB / RGBA: every mode converted first, composited after.
        out.append(Variant("fill-after_resize-decoded-to-rgb",
                           lambda s: s.replace(stage=other, convert_first=s.convert_first | ALL_MODES)))
    return tuple(out)


CATALOGUE: tuple[RootCause, ...] = (
    _before_pipeline(
        "exif-orientation",
        "the EXIF orientation applied (ImageOps.exif_transpose) where the checkpoint ignores it; a "
        "transposing orientation of a non-square image is a grid_mismatch instead",
        {"exif_transpose": request.exif_transposed},
        lambda img, p, config, steps: request.exif_orientation(img) != 1,
    ),
    _before_pipeline(
        "animation-frame",
        "another frame of an animation than the one Pillow opens on (frame 0), which the checkpoint uses",
        {"last-frame": request.frame_taker(-1), "frame-1": request.frame_taker(1), "frame-2": request.frame_taker(2)},
        lambda img, p, config, steps: getattr(img, "n_frames", 1) > 1,
    ),
    _before_pipeline(
        "decoder",
        "pixels that differ only by decoding the file: another JPEG colour conversion, IDCT or chroma "
        "upsampling (by elimination when no decoder variant matches a lossy file)",
        {"jpeg-pillow-ycbcr-to-rgb": request.jpeg_pillow_ycbcr},
        lambda img, p, config, steps: request.is_jpeg(img),
    ),
    RootCause(
        "normalize-float",
        "normalization done in float32 arithmetic in another order or fused (x·scale+bias, addcmul, "
        "(x/255−mean)/std, (x−255·mean)/(255·std)) or cast to a half type, instead of the checkpoint's "
        "table; differs by less than one level",
        _fixed(*_swapping("normalize", _NORMALIZERS)),
        lambda img, p, config, steps: True,
        reference="float64-then-float32 table",
    ),
    RootCause(
        "resample-float",
        "8-bit images resized by another resampler than Pillow's fixed-point bicubic (torch's float32 "
        "or uint8 bicubic, another rounding, bilinear, nearest, area, a = −0.75)",
        _fixed(*_swapping("resample", _RESAMPLERS)),
        lambda img, p, config, steps: _resized(img, p) and _eight_bit_resize(img, config, steps),
        reference="pillow-bicubic",
    ),
    RootCause(
        "alpha-straight",
        "images with alpha resized without premultiplying, so hidden colours bleed",
        _fixed(Variant("straight-alpha", lambda s: s.replace(straight_alpha=True))),
        lambda img, p, config, steps: _resized(img, p) and has_alpha(img) and _eight_bit_resize(img, config, steps),
    ),
    RootCause(
        "palette-bicubic",
        "\"P\" and \"1\" images converted and resized bicubically, where Pillow resizes them with NEAREST",
        _fixed(Variant("palette-converted-first", lambda s: s.replace(convert_first=s.convert_first | {"P", "1"}))),
        lambda img, p, config, steps: _resized(img, p) and img.mode in ("P", "1"),
        enabling=True,
    ),
    RootCause(
        "convert-before-resize",
        "a mode converted to RGB/RGBA before the resize, where the checkpoint resizes in the source "
        "mode and converts after (16-bit, I, F, CMYK, YCbCr, LAB, PA, ...)",
        _fixed(Variant("converted-first", lambda s: s.replace(convert_first=s.convert_first | CONVERTED_FIRST))),
        lambda img, p, config, steps: (_resized(img, p) and img.mode in CONVERTED_FIRST
                                       and (img.mode not in _COMMUTING or "transparency" in img.info)),
        enabling=True,
    ),
    RootCause(
        "fill-stage",
        "the background composited at the other stage than transparent_bg_fill_stage says",
        _fill_stage_variants,
        lambda img, p, config, steps: _resized(img, p) and (img.mode != "RGB" or "transparency" in img.info),
        enabling=True,
    ),
    _before_pipeline(
        "flatten-white",
        "transparency pasted onto white (as vLLM's rgba_to_rgb) or black before the resize, instead of "
        "the config's background at its fill stage, or no composite at all without a background",
        {"paste-on-white": modes.flattened_on_white, "alpha-composite-on-white": modes.alpha_composited_on_white,
         "paste-on-black": modes.flattened_on_black},
        lambda img, p, config, steps: has_alpha(img),
    ),
    RootCause(
        "transparency-key",
        "a transparency key honoured where the checkpoint ignores it, or ignored where it honours it",
        _fixed(
            *_swapping("convert", {"key-ignored": modes.convert_ignoring_key,
                                   "key-honoured": modes.convert_honouring_key}),
            # As engines that convert at decode time do: RGB with a key becomes RGBA first.
            Variant("key-honoured-before-resize",
                    lambda s: s.replace(convert=modes.convert_honouring_key, convert_first=s.convert_first | {"RGB"})),
        ),
        lambda img, p, config, steps: "transparency" in img.info,
        enabling=True,
    ),
    _before_pipeline(
        "alpha-dropped",
        "the alpha discarded at decode (convert(\"RGB\") before anything else): no composite, and the "
        "hidden colours of transparent pixels resized as they are",
        {"convert-rgb": modes.alpha_dropped},
        lambda img, p, config, steps: has_alpha(img),
    ),
    RootCause(
        "composite-rounding",
        "the composite rounded or truncated differently",
        _fixed(*_swapping("composite", _BLENDS)),
        lambda img, p, config, steps: _composited(img, config),
    ),
    RootCause(
        "background",
        "another background: chessboard phase, square size, grey or white value, solid level",
        lambda config: tuple(Variant(name, (lambda c, n: lambda s: s.replace(background=modes.OtherBackground(n, c)))(change, name))
                             for name, change in modes.background_changes(config)),
        lambda img, p, config, steps: (_composited(img, config)
                                       or (steps.pad is layout.pad_background and bool(p.pad_w or p.pad_h))),
    ),
    RootCause(
        "pad",
        "padding with another value or on other sides",
        _fixed(*_swapping("pad", _PADS)),
        lambda img, p, config, steps: bool(p.pad_w or p.pad_h),
    ),
    RootCause(
        "patch-order",
        "patches or channels in another order",
        _fixed(*_swapping("patchify", _PATCH_ORDERS)),
        lambda img, p, config, steps: True,
    ),
)

MEANINGS: dict[str, str] = {c.id: c.meaning for c in CATALOGUE}
MEANINGS[UNEXPLAINED] = "none of the catalogued deviations accounts for the difference"
# Every id that can appear in `root_causes`, in catalogue order.
ROOT_CAUSE_IDS: tuple[str, ...] = tuple(MEANINGS)
BY_ID = {c.id: c for c in CATALOGUE}
_BY_ID = BY_ID


def meaning(root_cause: str) -> str:
    """The one-sentence meaning of a root-cause id (KeyError for an unknown id)."""
    return MEANINGS[root_cause]


def steps_for(config: PreprocessConfig, variants: Sequence[tuple[str, str]], base: Steps = CHECKPOINT) -> Steps:
    """`base` (the reference's steps) with the named (family, variant) pairs swapped in, in order."""
    steps = base
    for cause_id, name in variants:
        steps = BY_ID[cause_id].variant(config, name).apply(steps)
    return steps


def full_name(family: str, variant: str) -> str:
    """`family/variant`: how findings, profiles and `--assume` name a variant."""
    return f"{family}/{variant}"


def parse_assumption(text: str) -> tuple[str, str]:
    """`FAMILY=VARIANT` (or `FAMILY/VARIANT`) as a (family, variant) pair of the catalogue.

    The variant is checked against the family's variants under the default K3 config and under
    a config without background (backgrounds are per config: those are checked when applied).
    Raises AssumptionError naming what exists."""
    sep = "=" if "=" in text else "/"
    family, _, variant = text.partition(sep)
    family, variant = family.strip(), variant.strip()
    if family not in BY_ID:
        raise AssumptionError(f"--assume {text!r}: no step family {family!r}; families: {', '.join(BY_ID)}")
    if not variant:
        raise AssumptionError(f"--assume {text!r}: expected FAMILY=VARIANT")
    if family != "background":
        names = [v.name for config in (PreprocessConfig.k3(), PreprocessConfig.k25())
                 for v in BY_ID[family].variants(config)]
        if variant not in names:
            raise AssumptionError(f"--assume {text!r}: {family} has no variant {variant!r}; variants: "
                                  f"{', '.join(dict.fromkeys(names))}")
    return family, variant


def assumed_steps(config: PreprocessConfig, assume: Sequence[tuple[str, str]]) -> Steps:
    """The reference's steps with the assumed variants applied (those a config has no such
    variant for, such as another background under a config without one, are left out)."""
    steps = CHECKPOINT
    for family, name in assume:
        try:
            steps = BY_ID[family].variant(config, name).apply(steps)
        except KeyError:
            continue
    return steps
