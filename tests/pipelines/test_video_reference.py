"""The reference on K2.5 video chunks (issue 42): each frame resized by Pillow (bicubic) to the size
the chunk's first frame plans, zero-padded right and bottom, normalized, patchified frame-major.

The expected patches are built here from Pillow and NumPy directly (resize, pad, the checkpoint's
table, a reshape), not from the pipeline's code; the plan's sizes are hand calculations.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import ConfigError, InputError
from kimi_oracle.pipelines import reference
from kimi_oracle.pipelines.video import preprocess_chunks, preprocess_media

# K2.5 with a 6-patch frame budget: a 61x45 frame (4 x 3 = 12 floored patches) is resized.
SMALL = dataclasses.replace(PreprocessConfig.k25(), in_patch_limit_each_frame=6)


def _frame(w, h, seed, mode="RGB"):
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    return img.convert(mode) if mode != "RGB" else img


def _by_hand(frames, size, padded, config):
    """Patches of frames resized to `size` (Pillow bicubic), padded to `padded` with level 0,
    looked up in the checkpoint's table and cut into (t*gh*gw, 3, p, p), frame-major."""
    p = config.patch_size
    lut = reference.normalization_lut(config)
    rows = []
    for f in frames:
        rgb = np.asarray(f.convert("RGB").resize(size, Image.Resampling.BICUBIC))
        canvas = np.zeros((padded[1], padded[0], 3), dtype=np.uint8)
        canvas[: size[1], : size[0]] = rgb
        values = np.stack([lut[c][canvas[..., c]] for c in range(3)], axis=0)  # (3, H, W)
        gh, gw = padded[1] // p, padded[0] // p
        rows.append(values.reshape(3, gh, p, gw, p).transpose(1, 3, 0, 2, 4).reshape(gh * gw, 3, p, p))
    return torch.from_numpy(np.ascontiguousarray(np.concatenate(rows)))


def test_a_chunk_is_its_frames_at_the_first_frames_size():
    # 61x45 under 6 patches: scale sqrt(6 / 12) = 0.7071, 43 x 31, padded to 56 x 56: grid 4 x 4
    frames = [_frame(61, 45, 1), _frame(61, 45, 2), _frame(40, 30, 3)]  # the third of another size
    out = preprocess_chunks([frames], SMALL)
    assert out.grid_thws.tolist() == [[3, 4, 4]]
    assert torch.equal(out.pixel_values, _by_hand(frames, (43, 31), (56, 56), SMALL))


def test_a_batch_mixes_images_and_chunks_in_order():
    img, chunk = _frame(40, 30, 7), [_frame(61, 45, 8), _frame(61, 45, 9)]
    out = preprocess_media([img, chunk, img], SMALL)
    alone = reference.preprocess([img], SMALL)  # the image budget (16384): not resized
    assert out.grid_thws.tolist() == [[1, 4, 4], [2, 4, 4], [1, 4, 4]]
    n = 16
    assert torch.equal(out.pixel_values[:n], alone.pixel_values)
    assert torch.equal(out.pixel_values[n: 3 * n], preprocess_chunks([chunk], SMALL).pixel_values)
    assert torch.equal(out.pixel_values[3 * n:], alone.pixel_values)


def test_a_palette_or_alpha_frame_is_converted_to_rgb_by_pillow():
    # the checkpoint's _to_pil(frame).convert("RGB"): an alpha dropped (not composited on a background)
    rgba = _frame(28, 28, 5, "RGBA")
    rgba.putalpha(Image.fromarray(np.arange(28 * 28, dtype=np.uint8).reshape(28, 28) % 251, "L"))
    frames = [_frame(28, 28, 4, "P"), rgba, _frame(28, 28, 6, "L")]
    out = preprocess_chunks([frames], PreprocessConfig.k3().with_video_rules("k25"))  # 28x28: 4 patches
    assert torch.equal(out.pixel_values, _by_hand(frames, (28, 28), (28, 28), PreprocessConfig.k3()))


def test_bad_chunks_are_typed_errors():
    with pytest.raises(InputError, match="non-empty"):
        preprocess_chunks([[]], SMALL)
    with pytest.raises(InputError):
        preprocess_media([], SMALL)
    with pytest.raises(ConfigError, match="--video-rules k25"):
        preprocess_chunks([[_frame(28, 28, 1)]], PreprocessConfig.k3())
