"""Where a value lies: patch, resized pixel and original pixels, and one line that says so."""

from __future__ import annotations

from typing import Any, Sequence

from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.levels import is_sub_level


def locate(image: int, row: int, channel: int, py: int, px: int, grid: Sequence[int], patch: int,
           p: ResizePlan | None, size: tuple[int, int] | None = None) -> dict[str, Any]:
    """Where patch row `row`, (channel, py, px) of one image lies: patch, resized and original pixel."""
    _, gh, gw = (int(v) for v in grid)
    gy, gx = divmod(row, gw)
    y, x = gy * patch + py, gx * patch + px
    out: dict[str, Any] = {
        "image": image,
        "patch": row,
        "patch_yx": [gy, gx],
        "channel": "RGB"[channel] if 0 <= channel < 3 else channel,
        "pixel_in_patch": [px, py],
        "resized_xy": [x, y],
    }
    if p is not None:
        out["in_padding"] = bool(x >= p.new_w or y >= p.new_h)
        if not out["in_padding"] and size is not None:
            out["original_xy_range"] = [list(source_range(x, p.new_w, size[0])), list(source_range(y, p.new_h, size[1]))]
    return out


def source_range(i: int, out_size: int, in_size: int) -> tuple[int, int]:
    """Original-pixel span [lo, hi] that output pixel i of a resize from in_size to out_size covers."""
    if out_size == in_size:
        return i, i
    scale = in_size / out_size
    support = 2.0 * max(scale, 1.0)  # bicubic
    center = (i + 0.5) * scale
    lo = max(int(center - support + 0.5), 0)
    hi = min(int(center + support + 0.5), in_size) - 1
    return lo, max(lo, hi)


def _describe_location(loc: dict[str, Any]) -> str:
    if not loc:
        return "unknown"
    text = (f"image {loc['image']}, patch {loc['patch']} (row {loc['patch_yx'][0]}, col {loc['patch_yx'][1]}), "
            f"channel {loc['channel']}, resized pixel (x={loc['resized_xy'][0]}, y={loc['resized_xy'][1]})")
    if loc.get("in_padding"):
        text += " in the padding"
    elif "original_xy_range" in loc:
        (x0, x1), (y0, y1) = loc["original_xy_range"]
        xs = f"{x0}" if x0 == x1 else f"{x0}..{x1}"
        ys = f"{y0}" if y0 == y1 else f"{y0}..{y1}"
        text += f" from original x={xs}, y={ys}"
    if "expected_level" in loc:
        diff = loc.get("level_diff")
        if isinstance(diff, (int, float)) and is_sub_level(diff) and "expected_value" in loc:
            # Under one level both round to the same level: show the floats and their distance.
            ulp = loc.get("ulp_diff")
            text += (f": expected {loc['expected_value']:.9g}, got {loc['actual_value']:.9g} (level "
                     f"{loc['expected_level']:g} both; {diff:.3g} levels"
                     + (f", {ulp} ulp apart)" if ulp is not None else ")"))
        else:
            text += f": expected level {loc['expected_level']:g}, got {loc['actual_level']}"
    return text


def describe_location(loc: dict[str, Any]) -> str:
    """One readable line for a location dict from `pixel_stats`."""
    return _describe_location(loc)
