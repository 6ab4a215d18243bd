"""Image modes, alpha patterns and contents the generators express, and which alpha fits which mode."""

from __future__ import annotations

COMMON_MODES = ("RGB", "RGBA", "LA", "L", "P", "1", "CMYK", "I;16")
RARE_MODES = ("I;16B", "I", "F", "LAB", "PA", "YCbCr")
MODES = COMMON_MODES + RARE_MODES
# Modes that carry an alpha band.
ALPHA_BAND_MODES = ("RGBA", "LA", "PA")
# PNG_MODES (from core.images): modes whose files PNG stores losslessly; the rest go to TIFF.

# "key" is colour-key transparency (`info["transparency"]`, PNG tRNS on L/RGB/P images).
ALPHA_PATTERNS = (
    "opaque",
    "transparent",
    "checker",
    "checker_shifted",
    "gradient",
    "single_pixel",
    "random",
    "key",
)
CONTENTS = ("flat", "noise", "gradient", "edges")


MORE_KEY_MODES = ("1", "I;16")


def key_modes() -> tuple[str, ...]:
    """Every mode a `transparency` key is drawn for."""
    return tuple(m for m in MODES if "key" in alpha_patterns_for(m)) + MORE_KEY_MODES


def alpha_patterns_for(mode: str) -> tuple[str, ...]:
    """The alpha patterns `make_image` can express in `mode` ("opaque" for every mode)."""
    if mode in ALPHA_BAND_MODES:
        return tuple(a for a in ALPHA_PATTERNS if a != "key")
    if mode == "P":
        return ALPHA_PATTERNS
    if mode in ("L", "RGB"):
        return ("opaque", "key")
    return ("opaque",)
