"""The catalogue of step families: each root-cause id and the variants engines use for that step.

A family (`RootCause`) is one step of `kimi_oracle.pipelines.reference.Steps` done differently;
its variants (the functions of `kimi_oracle.pipelines.variants`) each swap that step into a
`Steps`. A variant's full name is `family/variant` (`resample-float/uint8-aa`). The ids are
public output (JSON, JUnit, Markdown, the gate's `--known` file); docs/diagnosis.md lists them.
Each family names its `Suitable` input: one on which every variant changes the output (the
tests run each variant on it, so a new family brings its own test input); `DOC_ROWS` holds its
row of the docs table (`diagnosis.table` renders it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from PIL import Image

from kimi_oracle.core.config import FILL_STAGES, PreprocessConfig
from kimi_oracle.core.errors import AssumptionError
from kimi_oracle.core.explanation import UNEXPLAINED
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.images import has_alpha
from kimi_oracle.oracle.diagnosis import fitted
from kimi_oracle.oracle.diagnosis import fitted_background
from kimi_oracle.oracle.diagnosis import fitted_bounds as bounds
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
    # Measured from an output (`RootCause.fitted`): free parameters, so an exact tie goes to an
    # enumerated variant (a fitted `clamp-0,180` reproduces a 1x1 chessboard case as well as the
    # flipped phase that made it).
    measured: bool = field(default=False, compare=False)


Touches = Callable[[Image.Image, ResizePlan, PreprocessConfig, Steps], bool]

# How far a family's variants move a value on its suitable input (`Suitable.levels`).
ONE_LEVEL_OR_MORE, UNDER_ONE_LEVEL, ANY_LEVELS = "one or more", "under one", "any"
# A budget of 6 patches makes a 61x45 image (12 floored patches) resample, to 43x31.
RESIZING: Mapping[str, Any] = {"in_patch_limit": 6}
CLIP_STATISTICS: Mapping[str, Any] = {"image_mean": (0.48145466, 0.4578275, 0.40821073),
                                      "image_std": (0.26862954, 0.26130258, 0.27577711)}


@dataclass(frozen=True)
class Suitable:
    """An input on which every variant of a family changes the output, as plain data (no test
    code in the package): tests/oracle/test_diagnosis.py runs each variant on it.

    `images`: each the fields of an `inputs.params.CaseParams`. `configs`: each the changes
    `inputs.configs.vary_config` makes to `profile` (one run per config: a family whose variants
    depend on the config names several). `each_image`: every image must change, not only one.
    `levels`: how far the variants move a value (`ONE_LEVEL_OR_MORE`, `UNDER_ONE_LEVEL`, `ANY_LEVELS`)."""

    images: tuple[Mapping[str, Any], ...]
    configs: tuple[Mapping[str, Any], ...] = (RESIZING,)
    profile: str = "k3"
    each_image: bool = False
    levels: str = ONE_LEVEL_OR_MORE


def _image(mode: str = "RGB", w: int = 61, h: int = 45, alpha: str = "opaque", seed: int = 1,
           **request: Any) -> dict[str, Any]:
    """The CaseParams fields of a noise image (61x45 resamples under `RESIZING`)."""
    return {"width": w, "height": h, "mode": mode, "alpha": alpha, "content": "noise", "seed": seed, **request}


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
    # An input on which each variant changes the output (None only while a family is drafted:
    # the tests then fail).
    suitable: Suitable | None = field(default=None, compare=False)
    # Fitted variants (`diagnosis.fitted`): `fit(FitInput)` measures them from an image's
    # outputs, `parse(name, config)` rebuilds one from its name (None: not such a name).
    fit: Callable[[Any], Sequence[tuple[str, Callable[[Steps], Steps]]]] | None = field(default=None, compare=False)
    parse: Callable[[str, PreprocessConfig], tuple[str, Callable[[Steps], Steps]] | None] | None = field(
        default=None, compare=False)

    def variant(self, config: PreprocessConfig, name: str) -> Variant:
        """The variant called `name` under `config`, enumerated or fitted (KeyError when there
        is none)."""
        for v in self.variants(config):
            if v.name == name:
                return v
        parsed = self.parse(name, config) if self.parse is not None else None
        if parsed is not None:
            return Variant(*parsed)
        raise KeyError(f"{self.id}: no variant {name!r} under this config")

    def fitted(self, fi: Any) -> list[Variant]:
        """The variants measured from one image's outputs (`fitted.FitInput`): none for a
        family without a fit."""
        return [] if self.fit is None else [Variant(name, apply, True) for name, apply in self.fit(fi)]


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
                     touches: Touches, suitable: Suitable) -> RootCause:
    """A family whose variants change the image before the pipeline (at decode: orientation,
    frame, decoder, alpha): one variant per name -> function, enabling by nature."""
    return RootCause(cause_id, meaning, _fixed(*(Variant(name, _prepared(f)) for name, f in named.items())), touches,
                     enabling=True, suitable=suitable)


# Modes the checkpoint resizes in their own domain and engines convert first. "P" and "1"
# belong to palette-bicubic, "RGBA" needs no conversion.
CONVERTED_FIRST = frozenset(Image.MODES) - {"P", "1", "RGBA", "RGBa", "La"}
ALL_MODES = frozenset(Image.MODES)
# Modes whose conversion to RGB commutes with the resize (unless a transparency key is set).
_COMMUTING = frozenset({"RGB", "L", "LA"})


# The images with alpha that every resize and decode variant of alpha changes (RGBA and LA).
_ALPHA_IMAGES = (_image("RGBA", alpha="random"), _image("LA", alpha="random"))


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
        Suitable(tuple(_image(w=40, h=40, seed=o, container="png", orientation=o) for o in (2, 3, 6))),
    ),
    _before_pipeline(
        "animation-frame",
        "another frame of an animation than the one Pillow opens on (frame 0), which the checkpoint uses",
        {"last-frame": request.frame_taker(-1), "frame-1": request.frame_taker(1), "frame-2": request.frame_taker(2)},
        lambda img, p, config, steps: getattr(img, "n_frames", 1) > 1,
        Suitable((_image("P", 40, 30, seed=0, container="gif", frames=3, disposal=1),
                  _image("RGBA", 40, 30, "random", seed=0, container="png", frames=3))),
    ),
    _before_pipeline(
        "decoder",
        "pixels that differ only by decoding the file: another JPEG colour conversion, IDCT or chroma "
        "upsampling (by elimination when no decoder variant matches a lossy file)",
        {"jpeg-pillow-ycbcr-to-rgb": request.jpeg_pillow_ycbcr},
        lambda img, p, config, steps: request.is_jpeg(img),
        Suitable((_image(w=40, h=30, seed=0, container="jpeg"), _image(w=40, h=30, seed=0, container="jpeg-444"))),
    ),
    RootCause(
        "normalize-float",
        "normalization done in float32 arithmetic in another order or fused (x·scale+bias, addcmul, "
        "(x/255−mean)/std, (x−255·mean)/(255·std)) or cast to a half type, instead of the checkpoint's "
        "table; differs by less than one level",
        _fixed(*_swapping("normalize", _NORMALIZERS)),
        lambda img, p, config, steps: True,
        reference="float64-then-float32 table",
        fit=lambda fi: fitted.fit_normalize(fi) + bounds.fit_clamp(fi),
        parse=lambda name, config: fitted.parse_normalize(name, config) or bounds.parse_clamp(name),
        # CLIP's statistics: float orders disagree with the table somewhere
        suitable=Suitable((_image(w=28, h=28),), (CLIP_STATISTICS,), levels=UNDER_ONE_LEVEL),
    ),
    RootCause(
        "resample-float",
        "8-bit images resized by another resampler than Pillow's fixed-point bicubic (torch's float32 "
        "or uint8 bicubic, another rounding, bilinear, nearest, area, a = −0.75)",
        _fixed(*_swapping("resample", _RESAMPLERS)),
        lambda img, p, config, steps: _resized(img, p) and _eight_bit_resize(img, config, steps),
        reference="pillow-bicubic",
        suitable=Suitable((_image(),)),
    ),
    RootCause(
        "alpha-straight",
        "images with alpha resized without premultiplying, so hidden colours bleed",
        _fixed(Variant("straight-alpha", lambda s: s.replace(straight_alpha=True))),
        lambda img, p, config, steps: _resized(img, p) and has_alpha(img) and _eight_bit_resize(img, config, steps),
        suitable=Suitable(_ALPHA_IMAGES),
    ),
    RootCause(
        "palette-bicubic",
        "\"P\" and \"1\" images converted and resized bicubically, where Pillow resizes them with NEAREST",
        _fixed(Variant("palette-converted-first", lambda s: s.replace(convert_first=s.convert_first | {"P", "1"}))),
        lambda img, p, config, steps: _resized(img, p) and img.mode in ("P", "1"),
        enabling=True,
        suitable=Suitable((_image("P"), _image("1"))),
    ),
    RootCause(
        "convert-before-resize",
        "a mode converted to RGB/RGBA before the resize, where the checkpoint resizes in the source "
        "mode and converts after (16-bit, I, F, CMYK, YCbCr, LAB, PA, ...)",
        _fixed(Variant("converted-first", lambda s: s.replace(convert_first=s.convert_first | CONVERTED_FIRST))),
        lambda img, p, config, steps: (_resized(img, p) and img.mode in CONVERTED_FIRST
                                       and (img.mode not in _COMMUTING or "transparency" in img.info)),
        enabling=True,
        suitable=Suitable(tuple(_image(m, alpha="random" if m == "PA" else "opaque")
                                for m in ("CMYK", "I;16", "PA", "YCbCr", "LAB", "I", "F")), each_image=True),
    ),
    RootCause(
        "fill-stage",
        "the background composited at the other stage than transparent_bg_fill_stage says",
        _fill_stage_variants,
        lambda img, p, config, steps: _resized(img, p) and (img.mode != "RGB" or "transparency" in img.info),
        enabling=True,
        suitable=Suitable((_image("RGBA", alpha="random"),)),
    ),
    _before_pipeline(
        "flatten-white",
        "transparency pasted onto white (as vLLM's rgba_to_rgb) or black before the resize, instead of "
        "the config's background at its fill stage, or no composite at all without a background",
        {"paste-on-white": modes.flattened_on_white, "alpha-composite-on-white": modes.alpha_composited_on_white,
         "paste-on-black": modes.flattened_on_black},
        lambda img, p, config, steps: has_alpha(img),
        Suitable((_image("RGBA", alpha="random"), _image("P", alpha="key"))),
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
        suitable=Suitable((_image("P", 28, 28, "key"), _image("RGB", 28, 28, "key")), ({},)),
    ),
    _before_pipeline(
        "alpha-dropped",
        "the alpha discarded at decode (convert(\"RGB\") before anything else): no composite, and the "
        "hidden colours of transparent pixels resized as they are",
        {"convert-rgb": modes.alpha_dropped},
        lambda img, p, config, steps: has_alpha(img),
        Suitable(_ALPHA_IMAGES),
    ),
    RootCause(
        "composite-rounding",
        "the composite rounded or truncated differently",
        _fixed(*_swapping("composite", _BLENDS)),
        lambda img, p, config, steps: _composited(img, config),
        suitable=Suitable((_image("RGBA", 28, 28, "random"),), ({},), levels=ANY_LEVELS),
    ),
    RootCause(
        "background",
        "another background: chessboard phase, square size, grey or white value, solid level",
        lambda config: tuple(Variant(name, (lambda c, n: lambda s: s.replace(background=modes.OtherBackground(n, c)))(change, name))
                             for name, change in modes.background_changes(config)),
        lambda img, p, config, steps: (_composited(img, config)
                                       or (steps.pad is layout.pad_background and bool(p.pad_w or p.pad_h))),
        # the checkpoint's chessboard and a white background: the variants are per background
        suitable=Suitable((_image("RGBA", 40, 40, "transparent"),), ({}, {"background": {"pattern": "white"}})),
        fit=fitted_background.fit_background, parse=lambda name, config: fitted_background.parse_background(name),
    ),
    RootCause(
        "pad",
        "padding with another value or on other sides",
        _fixed(*_swapping("pad", _PADS)),
        lambda img, p, config, steps: bool(p.pad_w or p.pad_h),
        suitable=Suitable((_image(w=30, h=30),), ({},)),
        fit=lambda fi: fitted.fit_pad(fi) + bounds.fit_pad_offset(fi),
        parse=lambda name, config: fitted.parse_pad(name) or bounds.parse_pad_offset(name),
    ),
    RootCause(
        "patch-order",
        "patches or channels in another order",
        _fixed(*_swapping("patchify", _PATCH_ORDERS)),
        lambda img, p, config, steps: True,
        suitable=Suitable((_image(w=28, h=28),), ({},)),
        fit=fitted.fit_patch_order, parse=lambda name, config: fitted.parse_patch_order(name),
    ),
)

# The catalogue table's rows in docs/diagnosis.md (rendered by `diagnosis.table`): per family, what
# the checkpoint does and the variants in words.
DOC_ROWS: dict[str, tuple[str, str]] = {
    "exif-orientation": ("ignored", "`exif_transpose`"),
    "animation-frame": ("frame 0", "`last-frame`, `frame-1`, `frame-2`"),
    "decoder": ("libjpeg's colour conversion",
        "`jpeg-pillow-ycbcr-to-rgb`; `by-elimination` (a lossy file nothing else moves)"),
    "normalize-float": ("float64-then-float32 table",
        "`x*scale+bias` (float32, scale = 1/(255·std), bias = −mean/std), `addcmul(bias,x,scale)` (one "
        "rounding, as `torch.addcmul` on CPU and a fused multiply-add), `addcmul(bias,x,scale), float64 "
        "constants` (scale and bias computed in float64 and stored as float32, as SGLang 0.5.23 and the "
        "`sglang-0.5.23` model do), `(x/255-mean)/std` (torchvision's rescale then normalize), "
        "`(x/255-mean)*(1/std)`, `(x-255*mean)/(255*std)` (the rescale folded into the statistics), "
        "`bfloat16`, `float16` (the checkpoint's values cast to a half type and back) — sub-level; fitted "
        "(any levels): `mean-a,b,c`, `std-d,e,f`, `mean-a,b,c-std-d,e,f`, each with `-KIND` when the "
        "arithmetic is not the table's (`-divide`, `-fused`, ...): other statistics, solved per channel from "
        "the affine relation between the reference's levels and the candidate's values and rounded to the "
        "fewest decimals that reproduce them; `clamp-LO,HI` (the levels clipped to [LO, HI] before the table)"),
    "resample-float": ("`pillow-bicubic`",
        "`torch-bicubic-antialias` (float32 `F.interpolate`, antialias, round half to even, clamp), "
        "`torch-bicubic` (no antialias, a = −0.75: OpenCV's INTER_CUBIC arithmetic in float), "
        "`torch-bicubic-antialias-truncated`, `torch-bicubic-truncated`, `torch-bicubic-antialias-half-up` "
        "(`floor(y + 0.5)`), `uint8-aa` (torch's uint8 antialiased bicubic: `F.interpolate` on a uint8 "
        "tensor, what torchvision's `resize` runs on uint8 images; a port of Pillow's filter, one level apart"
        " from it on a few values), `uint8-aa-bilinear` (torchvision's default bilinear on uint8), "
        "`bicubic-a-0.75-antialias` (Pillow's placement with a = −0.75, float), `pillow-bilinear`, "
        "`pillow-nearest`, `opencv-area` (INTER_AREA: pixel-area averaging, in float)"),
    "alpha-straight": ("premultiplied", "`straight-alpha`: RGBA / LA resampled without premultiplying"),
    "palette-bicubic": ("NEAREST for P / 1",
        "`palette-converted-first`: P and 1 converted to RGB (RGBA when transparent) before the resize"),
    "convert-before-resize": ("resized in the source mode",
        "`converted-first`: every other mode but RGBA converted to RGB / RGBA before the resize (16-bit, I, "
        "F, CMYK, YCbCr, LAB, PA, L or RGB with a transparency key)"),
    "fill-stage": ("the config's stage",
        "`fill-<other stage>`; when the other stage is after the resize also "
        "`fill-after_resize-decoded-to-rgb` (every mode converted first, as engines that decode to RGB(A))"),
    "flatten-white": ("the config's background",
        "`paste-on-white` (vLLM's rgba_to_rgb), `alpha-composite-on-white`, `paste-on-black` (a canvas made "
        "with `Image.new(\"RGB\", size)`) — before the resize"),
    "transparency-key": ("as Pillow's `convert`",
        "`key-ignored` (only an \"A\" band composites), `key-honoured` (RGB with a key composited), "
        "`key-honoured-before-resize` (RGB with a key converted to RGBA at decode)"),
    "alpha-dropped": ("composited",
        "`convert-rgb`: `convert(\"RGB\")` at decode (the alpha discarded; hidden colours resized as they are)"),
    "composite-rounding": ("float32, truncated",
        "`round-half-even`, `round-half-up`, `integer-rounded` ((α·c + (255−α)·b + 127) // 255), "
        "`integer-truncated`, `float64`"),
    "background": ("the config's",
        "`chessboard-phase-flipped`, `chessboard-square-N` (16, 8, 2·S, S/2), `chessboard-gray-N` (200, 180, "
        "128, 192), `chessboard-white-255`, `solid-black/white/gray`, and for solid configs "
        "`chessboard-default`, `chessboard-k3` — those that differ from the config; fitted (after the resize): "
        "`level-N` (a solid level), `chessboard-S-A,B` (S-pixel squares, A on the top left's parity, B on the other)"),
    "pad": ("level 0, bottom and right",
        "`pad-top-left`, `pad-background` (the background pattern in the padding), `pad-white`, "
        "`pad-after-normalize` (0.0 after the normalization: the mean level, not level 0); fitted: "
        "`level-N` / `levels-a,b,c` (any level the candidate's padding holds), `normalized-V` / "
        "`normalized-a,b,c` (a model value that is no level's), `offset-DX,DY[-FILL]` (the image DX, DY "
        "pixels into its canvas, the rest level 0 or FILL)"),
    "patch-order": ("(gh·gw, C, p, p), gy·gw + gx",
        "`channels-last` ((p, p, C) read as (C, p, p)), `patches-column-major`, `patch-transposed` ((C, px, "
        "py)), `channels-bgr`; fitted: `axes-a,b,c,d,e` (the (gh, p, gw, p, C) axes in another order), "
        "`channels-a,b,c` (output channel k holds channel a, b, c), `permuted-k0,k1,...` (output patch k is "
        "the reference's patch k_i; up to 256 patches); in a batch, `rows-of-image-J` (an image given image "
        "J's rows, bit for bit)"),
}
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
        configs = (PreprocessConfig.k3(), PreprocessConfig.k25())
        names = [v.name for config in configs for v in BY_ID[family].variants(config)]
        parse = BY_ID[family].parse
        if variant not in names and not (parse is not None and any(parse(variant, c) for c in configs)):
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
