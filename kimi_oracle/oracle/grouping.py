"""What makes two findings "the same finding": one key for the fuzzer, the harnesses and nightly.

A finding's key is its check, then — for pixel mismatches, crashes and timeouts — the mode class of
the image at fault (`RGBA+alpha`, `P`, ...); for pixel mismatches its magnitude band (`sub-level`:
float rounding only, under one level; `levels`: one level or more), so that float noise never
hides a 200-level bug of the same mode class; and for crashes and timeouts the exception type or
the way the process died. Invariance findings are keyed by the invariance broken. Two failures with
the same key are one finding (the smallest example is kept); different keys are different
findings, each shrunk on its own. Root causes (`oracle.diagnosis`) are attributed per key.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from PIL import Image

from kimi_oracle.core.images import has_alpha
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.oracle.kinds import CRASH, INVARIANCE, PER_MODE_CLASS, PIXEL_MISMATCH, TIMEOUT


def mode_class(img: Image.Image) -> str:
    """The image's mode, marked `+alpha` when it carries transparency."""
    return img.mode + ("+alpha" if has_alpha(img) else "")


def image_at_fault(stats: Mapping[str, Any] | None) -> int:
    """Index of the image a verdict blames (its worst pixel's image, else its first mismatch)."""
    stats = stats or {}
    worst = stats.get("worst")
    if isinstance(worst, Mapping) and "image" in worst:
        return int(worst["image"])
    mismatched = stats.get("mismatched")
    if mismatched:
        return int(mismatched[0].get("image", 0))
    return 0


def failure_type(stats: Mapping[str, Any] | None) -> str:
    """`CandidateDied`, `ValueError`, ... : the first word of a crash's or timeout's exception text."""
    text = str((stats or {}).get("exception", "")).split(":", 1)[0].strip()
    return text or "unknown"


SUB_LEVEL = "sub-level"
LEVELS = "levels"


def magnitude_band(stats: Mapping[str, Any] | None) -> str:
    """`sub-level` when the largest difference is under one level (float rounding), else `levels`."""
    return SUB_LEVEL if is_sub_level((stats or {}).get("max_level_diff", 0.0)) else LEVELS


def finding_key(check: str, stats: Mapping[str, Any] | None, images: Sequence[Image.Image]) -> str:
    """`pixel_mismatch[P+alpha]<levels>`, `crash[RGB](ValueError)`, `invariance[permutation]`,
    `grid_mismatch`."""
    if check == INVARIANCE:
        return f"{check}[{(stats or {}).get('kind', '?')}]"
    key = check
    if check in PER_MODE_CLASS and images:
        key += f"[{mode_class(images[min(image_at_fault(stats), len(images) - 1)])}]"
    if check == PIXEL_MISMATCH:
        key += f"<{magnitude_band(stats)}>"
    if check in (CRASH, TIMEOUT):
        key += f"({failure_type(stats)})"
    return key


def key_mode_class(key: str) -> str:
    """The mode class a key names (`RGBA+alpha`), or "" for keys without one."""
    start, end = key.find("["), key.find("]")
    return key[start + 1 : end] if 0 <= start < end and not key.startswith(INVARIANCE) else ""
