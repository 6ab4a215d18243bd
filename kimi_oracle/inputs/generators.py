"""The input generators' public surface: every name of the modules below, re-exported.

Deterministic, seed-driven test inputs: image parameters, sizes, modes, alpha, configs.
Everything that feeds the oracle (hypothesis strategies, atheris harnesses, golden catalogue,
benchmarks) builds its inputs in these modules, so a size class or an alpha pattern is defined
once. Images are described by a small frozen `CaseParams` record (`params`); `make_image(params)`
(`images`) turns it into the same PIL image on every machine (NumPy's PCG64 streams are stable
across platforms). The jobs: `modes` (modes, alpha patterns, contents), `contents` (pixel
arrays), `images` (make_image), `sizes` (size classes and thresholds), `configs` (config
variations and the fuzzers' choices), `params` (CaseParams), `cases` (FuzzCase).
`kimi_oracle.inputs.generators` keeps every name it had, private ones included.
"""

from __future__ import annotations

from kimi_oracle.core.images import PNG_MODES
from kimi_oracle.inputs.cases import FuzzCase
from kimi_oracle.inputs.configs import (CHECKER_SQUARES, CHESS_VALUES, FIXED_TOKENS, MERGE_SIZES, NORMALIZATIONS,
                                        PATCH_SIZES, SMALL_PATCH_LIMITS, ConfigChoices, _base_first, config_choices,
                                        config_label, config_variants, side_caps, vary_config)
from kimi_oracle.inputs.contents import _palette, _rng, alpha_array, content_array
from kimi_oracle.inputs.images import (_ALPHA_ARRAY_MODES, _P_ALPHA_LEVELS, GENERATOR_VERSION, _Look, _memory_image,
                                       _transparency, _with_band, images_equal, make_image)
from kimi_oracle.inputs.modes import (ALPHA_BAND_MODES, ALPHA_PATTERNS, COMMON_MODES, CONTENTS, MODES,
                                      MORE_KEY_MODES, RARE_MODES, alpha_patterns_for, key_modes)
from kimi_oracle.inputs.params import _REQUEST_DEFAULTS, CaseParams
from kimi_oracle.inputs.sizes import (DEFAULT_MAX_SIDE, PRIME_SIDES, REAL_WORLD_SIZES, SIZE_CLASSES,
                                      _pass_order_widths, _plan_arrays, budget_sizes, multiple_sides,
                                      pass_order_sizes, pow2_sides, primes, random_sizes, ratio_long_side,
                                      ratio_sizes, real_world_sizes, side_cap_sizes, size_catalogue,
                                      special_sides, threshold_sizes, tiny_sizes)

__all__ = [
    "CHECKER_SQUARES",
    "CHESS_VALUES",
    "ConfigChoices",
    "FIXED_TOKENS",
    "MERGE_SIZES",
    "NORMALIZATIONS",
    "PATCH_SIZES",
    "config_choices",
    "ratio_long_side",
    "special_sides",
    "threshold_sizes",
    "ALPHA_BAND_MODES",
    "ALPHA_PATTERNS",
    "COMMON_MODES",
    "CONTENTS",
    "CaseParams",
    "FuzzCase",
    "GENERATOR_VERSION",
    "MODES",
    "PNG_MODES",
    "RARE_MODES",
    "REAL_WORLD_SIZES",
    "SIZE_CLASSES",
    "SMALL_PATCH_LIMITS",
    "alpha_array",
    "alpha_patterns_for",
    "key_modes",
    "MORE_KEY_MODES",
    "budget_sizes",
    "config_label",
    "config_variants",
    "content_array",
    "images_equal",
    "make_image",
    "multiple_sides",
    "pass_order_sizes",
    "pow2_sides",
    "primes",
    "random_sizes",
    "ratio_sizes",
    "real_world_sizes",
    "side_cap_sizes",
    "side_caps",
    "size_catalogue",
    "tiny_sizes",
    "vary_config",
]
