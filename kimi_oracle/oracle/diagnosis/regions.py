"""Localization: where two outputs of one image differ (pad, interior, border, alpha, channel, patch).

Every region is a set of output values of one image's (N, 3, p, p) patches, laid back onto the
padded (hp, wp) canvas: `pad` (below and right of the resized image), `image` (the rest), split
into `border` (the BORDER_BAND outer rows and columns of the resized image, where a resampler's
edge handling shows) and `interior`; for an image with alpha also `alpha-partial` (its resized
alpha neither 0 nor 255) and `transparent` (resized alpha 0). `Where` says how many differing
values each region holds, which regions hold them all (`confined_to`), which channels, patches
and positions inside a patch they touch, and by how much (levels, histogram). Rule:
docs/diagnosis.md ("Localization").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.images import has_alpha
from kimi_oracle.oracle.checks import levels_of

# Rows and columns at each edge of the resized image that form its `border` band.
BORDER_BAND = 2
# The region names, in the order reports list them.
REGIONS = ("pad", "image", "border", "interior", "alpha-partial", "transparent")
# The families whose variants can change a value of the padding (the pad itself, its
# normalization, where the values land, the background a pad may take): a difference confined
# to the pad is never named after any other.
PAD_FAMILIES = frozenset({"pad", "normalize-float", "patch-order", "background"})
# Upper bounds of the level histogram's bins (|Δ| in levels; the last bin is open).
HISTOGRAM_BOUNDS = (1.0, 2.0, 4.0, 16.0, 64.0, 256.0)
HISTOGRAM_BINS = ("<1", "1", "2-3", "4-15", "16-63", "64-255", ">=256")


def canvas(patches: torch.Tensor | np.ndarray, p: ResizePlan, patch: int) -> np.ndarray:
    """(N, 3, p, p) patches (the checkpoint's order) laid back as the (hp, wp, 3) canvas."""
    arr = patches.detach().cpu().numpy() if isinstance(patches, torch.Tensor) else np.asarray(patches)
    _, gh, gw = p.grid_thw
    return arr.reshape(gh, gw, 3, patch, patch).transpose(0, 3, 1, 4, 2).reshape(gh * patch, gw * patch, 3)


def _alpha_classes(img: Image.Image | None, p: ResizePlan) -> tuple[np.ndarray, np.ndarray] | None:
    """(partial, transparent) masks over the resized image, from its alpha resized as the
    checkpoint resizes images (Pillow bicubic); None for an image without alpha."""
    if img is None or not has_alpha(img):
        return None
    try:
        alpha = img.convert("RGBA").getchannel("A")
        if alpha.size != (p.new_w, p.new_h):
            alpha = alpha.resize((p.new_w, p.new_h), Image.Resampling.BICUBIC)
    except (ValueError, OSError):
        return None
    a = np.asarray(alpha)
    return (a > 0) & (a < 255), a == 0


def region_masks(img: Image.Image | None, p: ResizePlan, patch: int) -> dict[str, np.ndarray]:
    """Each region as a boolean (hp, wp) mask of the padded canvas (alpha regions only for an
    image with alpha)."""
    hp, wp = p.new_h + p.pad_h, p.new_w + p.pad_w
    inside = np.zeros((hp, wp), dtype=bool)
    inside[: p.new_h, : p.new_w] = True
    core = np.zeros((hp, wp), dtype=bool)
    b = BORDER_BAND
    core[b: max(p.new_h - b, b), b: max(p.new_w - b, b)] = True
    masks = {"pad": ~inside, "image": inside, "border": inside & ~core, "interior": core}
    alpha = _alpha_classes(img, p)
    if alpha is not None:
        for name, m in zip(("alpha-partial", "transparent"), alpha):
            full = np.zeros((hp, wp), dtype=bool)
            full[: p.new_h, : p.new_w] = m
            masks[name] = full
    return masks


def histogram(delta: np.ndarray) -> dict[str, int]:
    """Counts of |Δ| levels per bin (`HISTOGRAM_BINS`), non-finite values in the last."""
    # (levels measured through float32 values: 0.99996 is one level)
    d = np.where(np.isfinite(delta), np.round(np.abs(delta), 3), np.inf)
    idx = np.searchsorted(np.array(HISTOGRAM_BOUNDS), d, side="right")
    counts = np.bincount(idx, minlength=len(HISTOGRAM_BINS))
    return {name: int(c) for name, c in zip(HISTOGRAM_BINS, counts) if c}


@dataclass
class Where:
    """Where and by how much one image's two outputs differ."""

    differing: int
    total: int
    regions: dict[str, int] = field(default_factory=dict)  # differing values per region
    confined_to: list[str] = field(default_factory=list)  # regions that hold every one of them
    channels: list[int] = field(default_factory=list)
    patches: int = 0  # patches with a differing value
    num_patches: int = 0
    positions: int = 0  # distinct (y, x) positions inside a patch that differ
    max_levels: float = 0.0
    mean_levels: float = 0.0
    histogram: dict[str, int] = field(default_factory=dict)
    image: int = 0

    @property
    def confined_to_pad(self) -> bool:
        """True when every differing value lies in the padding."""
        return self.differing > 0 and "pad" in self.confined_to

    def summary(self) -> str:
        """One line: `pad only: 384 values of 1 level (3 channels, 12 of 30 patches)`."""
        if not self.differing:
            return "no difference"
        places = [r for r in self.confined_to if r != "image"] or list(self.confined_to)
        head = (f"{' and '.join(places)} only" if places else
                "spread: " + ", ".join(f"{r} {n}" for r, n in self.regions.items() if n and r != "image"))
        chans = "RGB"[self.channels[0]] + " only" if len(self.channels) == 1 else f"{len(self.channels)} channels"
        return (f"{head}: {self.differing} of {self.total} values, max {self.max_levels:.3g} / mean "
                f"{self.mean_levels:.3g} levels ({chans}, {self.patches} of {self.num_patches} patches)")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the `where` object of a finding and of a gate row's `change`)."""
        return {"image": self.image, "differing": self.differing, "values": self.total,
                "regions": dict(self.regions), "confined_to": list(self.confined_to),
                "channels": list(self.channels), "patches": self.patches, "num_patches": self.num_patches,
                "positions_in_patch": self.positions,
                "max_levels": _num(self.max_levels), "mean_levels": _num(self.mean_levels),
                "histogram": dict(self.histogram), "summary": self.summary()}


def _num(v: float) -> float | None:
    return round(float(v), 6) if np.isfinite(v) else None


def locate(a: torch.Tensor, b: torch.Tensor, img: Image.Image | None, p: ResizePlan,
           config: PreprocessConfig, image: int = 0) -> Where:
    """Where two (N, 3, p, p) outputs of one image differ bitwise, and by how much (levels of
    `config`'s normalization)."""
    patch = config.patch_size
    if a.dtype == torch.bfloat16 and b.dtype != torch.bfloat16:  # (as `levels.Target` compares one)
        b = b.to(torch.bfloat16)
    a32, b32 = a.detach().float().contiguous(), b.detach().float().contiguous()
    differ = (a32.view(torch.int32) != b32.view(torch.int32)).numpy()
    where = Where(int(differ.sum()), int(differ.size), num_patches=int(differ.shape[0]), image=image)
    if not where.differing:
        return where
    delta = levels_of(a32, config)[differ] - levels_of(b32, config)[differ]
    finite = np.isfinite(delta)
    where.max_levels = float(np.abs(delta).max()) if finite.all() else float("inf")
    where.mean_levels = float(np.abs(delta).mean()) if finite.all() else float("inf")
    where.histogram = histogram(delta)
    where.channels = [c for c in range(3) if differ[:, c].any()]
    where.patches = int(differ.reshape(differ.shape[0], -1).any(axis=1).sum())
    where.positions = int(differ.any(axis=(0, 1)).sum())
    laid = canvas(differ, p, patch)
    px = laid.any(axis=2)
    for name, mask in region_masks(img, p, patch).items():
        where.regions[name] = int(laid[mask].sum())
        if not (px & ~mask).any():
            where.confined_to.append(name)
    return where
