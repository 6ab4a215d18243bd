"""The golden catalogue: which sizes (grids) and which pixel cases each profile records."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kimi_oracle.core.config import FILL_STAGES, PATTERNS, PreprocessConfig


# Sizes (W, H) of the small-limit matrix: all resample under k3-small (16 patches); tall ones
# make Pillow 13 run its vertical pass first, wide and square ones the horizontal pass.
RESAMPLE_SIZES = ((97, 73), (61, 150), (150, 61), (85, 85), (120, 47), (43, 130), (71, 99), (113, 88))
# Small sizes for the full-limit profiles (no resampling there: fill, pad, normalize, patchify).
SMALL_SIZES = ((1, 1), (13, 7), (29, 29), (37, 23), (56, 56), (57, 30), (100, 3), (3, 100))
# Cheap resampling under the full limits: the side cap binds (7200 -> 7168 px).
SIDE_CAP_SIZES = ((7200, 30), (30, 7200))
SIDE_CAP_MODES = ("RGB", "RGBA", "LA", "P", "L", "I;16")
# ---------------------------------------------------------------------------------------------
# catalogue


def _generators():
    # Imported lazily: generators.py is shared with the fuzzers and may grow heavy imports.
    from kimi_oracle.inputs import generators

    return generators


def grid_catalogue(profile: str) -> list[tuple[int, int, str]]:
    """(width, height, size_class) of the grid goldens of `profile`, sorted by (width, height)."""
    config = PreprocessConfig.profile(profile)
    return sorted(_generators().size_catalogue(config), key=lambda s: (s[0], s[1]))


@dataclass(frozen=True)
class PixelCase:
    """One pixel golden: an image (generator parameters) under `profile` with config overrides."""

    id: str
    profile: str
    params: Any  # generators.CaseParams
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def config(self) -> PreprocessConfig:
        """The profile's config with this case's overrides (`generators.vary_config` keywords)."""
        base = PreprocessConfig.profile(self.profile)
        if not self.overrides:
            return base
        return _generators().vary_config(base, **json.loads(json.dumps(dict(self.overrides))))

    def config_key(self) -> str:
        """Cases with equal keys run under the same config (one candidate call)."""
        return json.dumps(dict(self.overrides), sort_keys=True)

    def make_image(self):
        """A fresh PIL image for this case."""
        return _generators().make_image(self.params)

    def describe(self) -> str:
        """`id (37x5 RGBA checker noise seed 3)`."""
        return f"{self.id} ({self.params.describe()})"

    @classmethod
    def from_entry(cls, profile: str, entry: Mapping[str, Any]) -> "PixelCase":
        """The case a recorded pixel entry describes."""
        params = _generators().CaseParams.from_dict(entry["params"])
        return cls(str(entry["id"]), profile, params, dict(entry.get("overrides") or {}))


def _pick(case_id: str, salt: str, options: Sequence[Any]) -> Any:
    # Derived from the case's id, not its position: adding a mode or a pattern adds entries
    # without changing the images of the existing ones.
    digest = hashlib.sha256(f"{salt}:{case_id}".encode()).digest()
    return options[int.from_bytes(digest[:8], "big") % len(options)]


def _case(profile: str, case_id: str, mode: str, alpha: str, sizes: Sequence[tuple[int, int]],
          overrides: Mapping[str, Any] | None = None, content: str | None = None) -> PixelCase:
    gen = _generators()
    w, h = _pick(case_id, "size", sizes)
    params = gen.CaseParams(
        width=w,
        height=h,
        mode=mode,
        alpha=alpha,
        content=content or _pick(case_id, "content", gen.CONTENTS),
        seed=_pick(case_id, "seed", range(10000)),
    )
    return PixelCase(case_id, profile, params, dict(overrides or {}))


def _mode_alpha_pairs() -> list[tuple[str, str]]:
    gen = _generators()
    return [(mode, alpha) for mode in gen.MODES for alpha in gen.alpha_patterns_for(mode)]


def pixel_catalogue(profile: str) -> list[PixelCase]:
    """The pixel cases of `profile`, in file order.

    k3-small (and any profile with a background whose limit forces resampling): one case per
    mode × alpha pattern × fill stage × background pattern. k3 and k25: one case per mode ×
    alpha pattern at the profile's own config (small, not resampled), plus side-cap cases that
    do resample cheaply, and for k25 one image over the patch budget.
    """
    PreprocessConfig.profile(profile)  # validates the name
    cases: list[PixelCase] = []
    if profile == "k3-small":
        for stage in FILL_STAGES:
            for pattern in PATTERNS:
                overrides = {"transparent_bg_fill_stage": stage, "background": {"pattern": pattern}}
                for mode, alpha in _mode_alpha_pairs():
                    cid = f"{mode}/{alpha}/{stage}/{pattern}"
                    cases.append(_case(profile, cid, mode, alpha, RESAMPLE_SIZES, overrides))
    else:
        for mode, alpha in _mode_alpha_pairs():
            cases.append(_case(profile, f"{mode}/{alpha}", mode, alpha, SMALL_SIZES))
        gen = _generators()
        for mode in SIDE_CAP_MODES:
            alphas = gen.alpha_patterns_for(mode)
            alpha = "checker" if "checker" in alphas else alphas[-1]
            cases.append(_case(profile, f"side_cap/{mode}/{alpha}", mode, alpha, SIDE_CAP_SIZES,
                               content="gradient"))
        if profile == "k25":
            # 2000x1800: 142 x 128 = 18176 floored patches > 16384, so the budget binds.
            cases.append(_case(profile, "budget/RGB/opaque", "RGB", "opaque", [(2000, 1800)],
                               content="gradient"))
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "pixel case ids must be unique"
    return cases
