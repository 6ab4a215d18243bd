"""A batch-only defect (issue 41, item 8): an engine that groups a call's images by target size and
keeps one stale buffer per group, so that every image of a group after the first gets the first
one's rows. A batch of one, or of images of different target sizes, is right.

Self-contained (a `path.py:function` candidate): `stale_group_rows`.
"""

from __future__ import annotations

import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.pipelines import reference


def stale_group_rows(images: list[Image.Image], config: PreprocessConfig) -> PreprocessResult:
    """Each image preprocessed alone (the reference), then the rows of each image whose target size
    an earlier image of the call has replaced by that earlier image's rows."""
    first_of: dict[tuple[int, int], torch.Tensor] = {}
    rows, grids = [], []
    for img in images:
        p = plan(img.width, img.height, config)
        one = reference.preprocess([img], config)
        pixels = first_of.setdefault((p.new_w, p.new_h), one.pixel_values)
        rows.append(pixels)
        grids.append(one.grid_thws)
    return PreprocessResult(torch.cat(rows), torch.cat(grids))
