"""FuzzCase: one differential-test case, a configuration and the batch of images it is run on."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.inputs.configs import config_label
from kimi_oracle.inputs.images import make_image
from kimi_oracle.inputs.params import CaseParams

@dataclass(frozen=True)
class FuzzCase:
    """One differential-test case: a configuration and the batch of images it is run on."""

    config: PreprocessConfig
    images: tuple[CaseParams, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "images", tuple(self.images))
        if not self.images:
            raise ValueError("FuzzCase needs at least one image")

    def make_images(self) -> list[Image.Image]:
        """Fresh PIL images for the batch (a candidate may not alter the reference's inputs)."""
        return [make_image(p) for p in self.images]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the config as the checkpoint's dict, the images as `CaseParams` dicts."""
        return {
            "profile": self.config.name,
            "config": self.config.to_hf_json(),
            "images": [p.to_dict() for p in self.images],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FuzzCase":
        """Inverse of `to_dict`."""
        config = PreprocessConfig.from_hf_json(data["config"])
        config = dataclasses.replace(config, name=str(data.get("profile") or config.name))
        return cls(config, tuple(CaseParams.from_dict(p) for p in data["images"]))

    def describe(self) -> str:
        """A short human label of the batch and the config."""
        images = "; ".join(p.describe() for p in self.images)
        return f"[{images}] under {config_label(self.config)}"
