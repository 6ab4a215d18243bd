"""What makes two findings "the same finding": one key for the fuzzer, the harnesses and nightly.

A finding's key is its check, then — for pixel mismatches and timeouts — the mode class of
the image at fault (`RGBA+alpha`, `P`, ...); for pixel mismatches its magnitude band (`sub-level`:
float rounding only, under one level; `levels`: one level or more), so that float noise never
hides a 200-level bug of the same mode class; for timeouts the way the call died. A crash is keyed
by its cause alone, not by mode class: the exception type and the message's signature (addresses
as `ADDR`, numbers as `N`, brackets and quotes dropped, cut at a word near 80 characters), so that one cause met on 18 mode
classes is one finding, and two refusals (`patch size 16`, `merge kernel (1, 1)`) are two that
shrinking never folds into one. Invariance findings are keyed by the invariance broken. Two failures with
the same key are one finding (the smallest example is kept); different keys are different
findings, each shrunk on its own. Root causes (`oracle.diagnosis`) are attributed per key.
"""

from __future__ import annotations

import re
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


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")  # (an object's address: another each run)
_NUMBER = re.compile(r"\d+")
_BEFORE_PUNCT = re.compile(r" +([,.;:!?])")
_DROPPED = re.compile(r"[\[\](){}<>'\"`|]")
SIGNATURE_CHARS = 80


def failure_signature(stats: Mapping[str, Any] | None) -> str:
    """`ValueError: Unsupported Kimi vision patch size N; expected N.`: a crash's type and the first
    line of its message with numbers as N (the cause, not the case)."""
    text = str((stats or {}).get("exception", "")).strip().splitlines()
    kind, _, message = (text[0] if text else "").partition(":")
    message = " ".join(_DROPPED.sub(" ", _NUMBER.sub("N", _ADDRESS.sub("ADDR", message))).split())
    message = _BEFORE_PUNCT.sub(r"\1", message)
    if len(message) > SIGNATURE_CHARS:  # (cut at a word)
        message = message[:SIGNATURE_CHARS].rsplit(" ", 1)[0] + " ..."
    kind = kind.strip() or "unknown"
    return f"{kind}: {message}" if message else kind


def magnitude_band(stats: Mapping[str, Any] | None) -> str:
    """`sub-level` when the largest difference is under one level (float rounding), else `levels`."""
    return SUB_LEVEL if is_sub_level((stats or {}).get("max_level_diff", 0.0)) else LEVELS


def finding_key(check: str, stats: Mapping[str, Any] | None, images: Sequence[Image.Image]) -> str:
    """`pixel_mismatch[P+alpha]<levels>`, `crash(ValueError: no N-th thing)`, `timeout[P](CallTimedOut)`,
    `invariance[permutation]`, `grid_mismatch`."""
    if check == INVARIANCE:
        return f"{check}[{(stats or {}).get('kind', '?')}]"
    if check == CRASH:
        return f"{check}({failure_signature(stats)})"
    key = check
    if check in PER_MODE_CLASS and images:
        key += f"[{mode_class(images[min(image_at_fault(stats), len(images) - 1)])}]"
    if check == PIXEL_MISMATCH:
        key += f"<{magnitude_band(stats)}>"
    if check == TIMEOUT:
        key += f"({failure_type(stats)})"
    return key


def key_mode_class(key: str) -> str:
    """The mode class a key names (`RGBA+alpha`), or "" for keys without one."""
    start, end = key.find("["), key.find("]")
    if key.startswith((INVARIANCE, CRASH + "(")):  # (a crash is keyed by its cause: no mode class)
        return ""
    return key[start + 1 : end] if 0 <= start < end else ""
