"""Diff images: a result's patches back as a picture, and expected | actual | |difference| panels."""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.result import PreprocessResult



def unpatchify(result: PreprocessResult, index: int, config: PreprocessConfig) -> np.ndarray | None:
    """float64 levels (Hp, Wp, 3) of image `index` of a result, using its own grid; None when the
    result's grids do not describe its rows."""
    from kimi_oracle.oracle.checks import levels_of

    try:
        grids = result.grid_thws.tolist()
        offsets = result.patch_offsets()
        if offsets[-1] != result.pixel_values.shape[0] or index >= len(grids):
            return None
        _, gh, gw = (int(v) for v in grids[index])
        p = config.patch_size
        rows = result.pixel_values[offsets[index] : offsets[index + 1]]
        if tuple(rows.shape[1:]) != (3, p, p) or rows.shape[0] != gh * gw:
            return None
        lv = levels_of(rows, config).reshape(gh, gw, 3, p, p)
        return lv.transpose(0, 3, 1, 4, 2).reshape(gh * p, gw * p, 3)
    except Exception:
        return None


def _to_u8(levels: np.ndarray) -> np.ndarray:
    return np.clip(np.nan_to_num(np.rint(levels), nan=0.0, posinf=255, neginf=0), 0, 255).astype(np.uint8)


def _scale_panel(img: Image.Image, factor: float) -> Image.Image:
    w, h = img.size
    return img.resize((max(1, round(w * factor)), max(1, round(h * factor))), Image.Resampling.NEAREST)


def diff_image(expected: PreprocessResult, actual: PreprocessResult, config: PreprocessConfig,
               index: int = 0) -> Image.Image | None:
    """Side by side: expected output, actual output, amplified |difference| (when shapes agree)."""
    exp = unpatchify(expected, index, config)
    act = unpatchify(actual, index, config)
    panels: list[tuple[str, Image.Image]] = []
    if exp is not None:
        panels.append(("expected", Image.fromarray(_to_u8(exp), "RGB")))
    if act is not None:
        panels.append(("actual", Image.fromarray(_to_u8(act), "RGB")))
    if exp is not None and act is not None and exp.shape == act.shape:
        d = np.abs(np.nan_to_num(act, nan=1e9, posinf=1e9, neginf=1e9) - exp).max(axis=2)
        peak = float(d.max())
        gain = 255.0 / peak if peak > 0 else 1.0
        amp = np.clip(np.rint(d * gain), 0, 255).astype(np.uint8)
        # Any difference at all shows up: a 1-ulp change would otherwise round to black.
        amp[(d > 0) & (amp == 0)] = 1
        heat = np.zeros(d.shape + (3,), dtype=np.uint8)
        heat[..., 0] = amp
        heat[..., 1] = np.where(d > 0, np.maximum(amp // 3, 40), 0)
        panels.append((f"|diff| x{gain:.3g} (max {peak:.3g})", Image.fromarray(heat, "RGB")))
    if not panels:
        return None
    factor = panel_scale(max(p.width for _, p in panels), max(p.height for _, p in panels))
    scaled = [(label, _scale_panel(p, factor)) for label, p in panels]
    gap, line_height = 12, 14
    draw = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    labels = [_wrap_label(draw, label, p.width) for label, p in scaled]
    header = line_height * max(len(lines) for lines in labels) + 4
    width = sum(p.width for _, p in scaled) + gap * (len(scaled) + 1)
    height = max(p.height for _, p in scaled) + header + 2 * gap
    canvas = Image.new("RGB", (width, height), (48, 48, 48))
    draw = ImageDraw.Draw(canvas)
    x = gap
    for lines, (_, p) in zip(labels, scaled):
        for i, text in enumerate(lines):  # each label stays within its own panel's width
            draw.text((x, gap // 2 + i * line_height), text, fill=(230, 230, 230))
        canvas.paste(p, (x, header + gap))
        x += p.width + gap
    return canvas


# Diff pictures: upscaled (nearest) so that a panel's short side is at least this many pixels, its
# long side at most the cap.
MIN_SHORT_SIDE = 256
MAX_LONG_SIDE = 2048


def panel_scale(width: int, height: int) -> float:
    """The nearest-neighbour scale of a panel: an integer ≥ 1 that brings the short side to at
    least MIN_SHORT_SIDE without the long side passing MAX_LONG_SIDE; below 1 for large panels."""
    short, long = max(1, min(width, height)), max(1, width, height)
    if long > MAX_LONG_SIDE:
        return MAX_LONG_SIDE / long
    up = -(-MIN_SHORT_SIDE // short)  # ceil
    return float(max(1, min(up, MAX_LONG_SIDE // long)))


def _wrap_label(draw: Any, text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        trial = f"{line} {word}".strip()
        if line and draw.textlength(trial) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return lines + [line] if line else lines or [""]
