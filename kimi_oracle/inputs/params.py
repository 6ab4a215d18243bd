"""CaseParams: the frozen record of everything one generated image is made from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from kimi_oracle.inputs.modes import CONTENTS, MODES, MORE_KEY_MODES, alpha_patterns_for
from kimi_oracle.inputs.requests import check_request

@dataclass(frozen=True)
class CaseParams:
    """Everything `make_image` needs: size, mode, alpha pattern, content, seed, checker square,
    and what a request carries (inputs.requests): the container the image is encoded in, its
    EXIF orientation, ICC profile, frames, disposal mode and DPI. With a container, the image
    is the file as Pillow opens it."""

    width: int
    height: int
    mode: str = "RGB"
    alpha: str = "opaque"
    content: str = "noise"
    seed: int = 0
    square: int = 8  # edge of the alpha checkerboard's squares, in source pixels
    container: str = ""  # "": an image built in memory; else a name of inputs.requests.CONTAINERS
    orientation: int = 0  # EXIF Orientation 1..8; 0: no EXIF
    icc: str = ""  # an ICC profile name (inputs.requests.ICC_PROFILES); "": none
    frames: int = 1  # > 1: an animation (frame 1 is smaller than the canvas)
    disposal: int = 0  # the animation's disposal mode
    dpi: int = 0  # 0: no DPI stored

    def __post_init__(self) -> None:
        for key in ("width", "height", "seed", "square", "orientation", "frames", "disposal", "dpi"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"CaseParams.{key} must be an integer, got {value!r}")
            object.__setattr__(self, key, int(value))
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"CaseParams size must be positive, got {self.width}x{self.height}")
        if self.seed < 0:
            raise ValueError(f"CaseParams.seed must be >= 0, got {self.seed}")
        if self.square <= 0:
            raise ValueError(f"CaseParams.square must be positive, got {self.square}")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; expected one of {', '.join(MODES)}")
        if self.content not in CONTENTS:
            raise ValueError(f"unknown content {self.content!r}; expected one of {', '.join(CONTENTS)}")
        if self.alpha not in alpha_patterns_for(self.mode) and not (self.alpha == "key" and self.mode in MORE_KEY_MODES):
            raise ValueError(
                f"alpha pattern {self.alpha!r} is not expressible in mode {self.mode!r}; "
                f"expected one of {', '.join(alpha_patterns_for(self.mode))}"
            )
        check_request(self.mode, self.container, self.orientation, self.icc, self.frames, self.disposal, self.dpi,
                      self.alpha)

    @property
    def request(self) -> dict[str, Any]:
        """The request fields that differ from an in-memory image (empty for one)."""
        return {k: getattr(self, k) for k, v in _REQUEST_DEFAULTS.items() if getattr(self, k) != v}

    @property
    def size(self) -> tuple[int, int]:
        """(width, height), as PIL's `.size`."""
        return self.width, self.height

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; `CaseParams.from_dict(p.to_dict()) == p`. Request fields appear only
        when set, so an in-memory image's dict is what it was before they existed."""
        out = dataclasses.asdict(self)
        for key, default in _REQUEST_DEFAULTS.items():
            if out[key] == default:
                del out[key]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CaseParams":
        """Inverse of `to_dict`; unknown keys are an error, missing optional keys take defaults."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"CaseParams: unknown key {unknown[0]!r}")
        return cls(**dict(data))

    def describe(self) -> str:
        """A short human label, e.g. `37x5 RGBA checker/noise seed 3`."""
        alpha = "" if self.alpha == "opaque" else f" {self.alpha}"
        label = f"{self.width}x{self.height} {self.mode}{alpha} {self.content} seed {self.seed}"
        if self.container:
            extra = [self.container]
            if self.orientation:
                extra.append(f"orientation {self.orientation}")
            if self.frames > 1:
                extra.append(f"{self.frames} frames disposal {self.disposal}")
            if self.icc:
                extra.append(f"icc {self.icc}")
            if self.dpi:
                extra.append(f"dpi {self.dpi}")
            label += " (" + ", ".join(extra) + ")"
        return label


_REQUEST_DEFAULTS = {"container": "", "orientation": 0, "icc": "", "frames": 1, "disposal": 0, "dpi": 0}
