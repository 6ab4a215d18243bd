"""The common output type of every pipeline and candidate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the type only: importing this module imports no torch
    import torch


@dataclass
class PreprocessResult:
    """Patches of all images, concatenated, and one (t, h, w) grid row per image."""

    pixel_values: torch.Tensor  # (N, 3, p, p)
    grid_thws: torch.Tensor  # int64 (n_images, 3)

    @property
    def num_images(self) -> int:
        """Number of images (rows of `grid_thws`)."""
        return int(self.grid_thws.shape[0])

    def patch_offsets(self) -> list[int]:
        """Start row of each image in `pixel_values`, plus the total at the end."""
        offsets = [0]
        for t, h, w in self.grid_thws.tolist():
            offsets.append(offsets[-1] + int(t) * int(h) * int(w))
        return offsets

    def image(self, index: int) -> "PreprocessResult":
        """The rows and grid of one image."""
        offsets = self.patch_offsets()
        return PreprocessResult(
            self.pixel_values[offsets[index] : offsets[index + 1]],
            self.grid_thws[index : index + 1],
        )
