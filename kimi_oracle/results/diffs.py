"""Diff images: a result's patches back as a picture, and expected | actual | |difference| panels."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageDraw

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.result import PreprocessResult

if TYPE_CHECKING:
    import torch



def _patch_rows(result: PreprocessResult, index: int, config: PreprocessConfig) -> tuple[torch.Tensor, int, int] | None:
    """Image `index`'s (gh*gw, 3, p, p) rows of a result and its grid (gh, gw), using the result's
    own grid; None when the result's grids do not describe its rows."""
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
        return rows.detach().cpu().float(), gh, gw
    except Exception:
        return None


def unpatchify(result: PreprocessResult, index: int, config: PreprocessConfig) -> np.ndarray | None:
    """float64 levels (Hp, Wp, 3) of image `index` of a result, using its own grid; None when the
    result's grids do not describe its rows."""
    from kimi_oracle.oracle.checks import levels_of

    found = _patch_rows(result, index, config)
    if found is None:
        return None
    rows, gh, gw = found
    p = config.patch_size
    lv = levels_of(rows, config).reshape(gh, gw, 3, p, p)
    return lv.transpose(0, 3, 1, 4, 2).reshape(gh * p, gw * p, 3)


def _to_u8(levels: np.ndarray) -> np.ndarray:
    return np.clip(np.nan_to_num(np.rint(levels), nan=0.0, posinf=255, neginf=0), 0, 255).astype(np.uint8)


def _scaled(n: int, factor: float) -> int:
    """A panel side of `n` pixels scaled by `factor` (at least one pixel)."""
    return max(1, round(n * factor))


def _scale_panel(img: Image.Image, factor: float) -> Image.Image:
    w, h = img.size
    return img.resize((_scaled(w, factor), _scaled(h, factor)), Image.Resampling.NEAREST)


def diff_image(expected: PreprocessResult, actual: PreprocessResult, config: PreprocessConfig,
               index: int = 0) -> Image.Image | None:
    """Side by side: expected output, actual output, amplified |difference| (when shapes agree)."""
    rows = [_patch_rows(r, index, config) for r in (expected, actual)]
    p = config.patch_size
    sides = [(gh * p, gw * p) for _, gh, gw in (r for r in rows if r is not None)]
    factor = panel_scale(max(w for _, w in sides), max(h for h, _ in sides)) if sides else 1.0
    if factor < 1:
        panels = _sampled_panels(rows, config, factor)  # a large output: drawn at the picture's size
    else:
        panels = _full_panels(expected, actual, index, config)
    if not panels:
        return None
    return _canvas(panels)


def _full_panels(expected: PreprocessResult, actual: PreprocessResult, index: int,
                 config: PreprocessConfig) -> list[tuple[str, Image.Image]]:
    """The panels at the output's own size, scaled up (nearest) to a readable size."""
    exp = unpatchify(expected, index, config)
    act = unpatchify(actual, index, config)
    panels: list[tuple[str, Image.Image]] = []
    if exp is not None:
        panels.append(("expected", Image.fromarray(_to_u8(exp), "RGB")))
    if act is not None:
        panels.append(("actual", Image.fromarray(_to_u8(act), "RGB")))
    if exp is not None and act is not None and exp.shape == act.shape:
        panels.append(_heat(np.abs(np.nan_to_num(act, nan=1e9, posinf=1e9, neginf=1e9) - exp).max(axis=2)))
    if not panels:
        return panels
    factor = panel_scale(max(p.width for _, p in panels), max(p.height for _, p in panels))
    return [(label, _scale_panel(p, factor)) for label, p in panels]


def _heat(d: np.ndarray) -> tuple[str, Image.Image]:
    """The |difference| panel of per-pixel level differences `d` (NaN/inf counted as 1e9)."""
    peak = float(d.max())
    gain = 255.0 / peak if peak > 0 else 1.0
    amp = np.clip(np.rint(d * gain), 0, 255).astype(np.uint8)
    # Any difference at all shows up: a 1-ulp change would otherwise round to black.
    amp[(d > 0) & (amp == 0)] = 1
    heat = np.zeros(d.shape + (3,), dtype=np.uint8)
    heat[..., 0] = amp
    heat[..., 1] = np.where(d > 0, np.maximum(amp // 3, 40), 0)
    return f"|diff| x{gain:.3g} (max {peak:.3g})", Image.fromarray(heat, "RGB")


def _sampled_panels(rows: list[tuple[torch.Tensor, int, int] | None], config: PreprocessConfig,
                    factor: float) -> list[tuple[str, Image.Image]]:
    """The panels of an output larger than the picture (`factor` < 1), drawn at the picture's size without
    making the whole output's levels: expected and actual sampled at the pixels a nearest
    downscale picks, the |difference| the largest of each block of output pixels a picture
    pixel covers (computed in float32 from the values): a single differing value still shows."""
    import torch

    from kimi_oracle.oracle.checks.levels import _level_params

    p = config.patch_size
    offset, slope = _level_params(config)
    panels: list[tuple[str, Image.Image]] = []
    for label, found in zip(("expected", "actual"), rows):
        if found is None:
            continue
        v, gh, gw = found
        h, w = gh * p, gw * p
        ys, xs = _nearest(h, factor), _nearest(w, factor)
        picked = v.numpy()[(ys // p)[:, None] * gw + (xs // p)[None, :], :, (ys % p)[:, None], (xs % p)[None, :]]
        lv = (picked.astype(np.float64) - offset) / slope  # (th, tw, 3)
        panels.append((label, Image.fromarray(_to_u8(lv), "RGB")))
    if all(r is not None for r in rows) and rows[0][1:] == rows[1][1:]:  # type: ignore[index]
        (e, gh, gw), (a, _, _) = rows  # type: ignore[misc]
        inv = torch.from_numpy((1.0 / np.abs(slope)).astype(np.float32)).reshape(1, 3, 1, 1)
        d = (a - e).abs_().mul_(inv)
        # a non-finite value (or a difference past float32) counts as 1e9 levels, as in `_full_panels`
        d = torch.nan_to_num(d, nan=1e9, posinf=1e9).clamp_(max=1e9)
        d = torch.where(torch.isfinite(a), d, torch.tensor(1e9, dtype=d.dtype)).amax(dim=1)  # (N, p, p)
        full = d.reshape(gh, gw, p, p).permute(0, 2, 1, 3).reshape(gh * p, gw * p).numpy()
        h, w = full.shape
        pooled = np.maximum.reduceat(np.maximum.reduceat(full, _starts(h, factor), axis=0),
                                     _starts(w, factor), axis=1)
        panels.append(_heat(pooled.astype(np.float64)))
    return panels


def _nearest(n: int, factor: float) -> np.ndarray:
    """The source index Pillow's nearest resize of `n` pixels by `factor` (`_scale_panel`) reads
    for each output pixel: the resize of the indices themselves."""
    out = _scaled(n, factor)
    index = Image.fromarray(np.arange(n, dtype=np.int32).reshape(1, n), "I")
    return np.asarray(index.resize((out, 1), Image.Resampling.NEAREST), dtype=np.int64).reshape(-1)


def _starts(n: int, factor: float) -> np.ndarray:
    """The first source pixel of each output pixel's block in a downscale of `n` by `factor`."""
    out = _scaled(n, factor)
    return np.unique((np.arange(out) * (n / out)).astype(np.int64))


def _canvas(scaled: list[tuple[str, Image.Image]]) -> Image.Image:
    """The labelled panels side by side on one picture."""
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
