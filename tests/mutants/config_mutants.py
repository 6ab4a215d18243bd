"""Planted mutants that hard-code a configuration constant the Kimi profiles happen to share (issue 12,
item 3): they agree with the checkpoint on every k3/k25 input and are wrong as soon as the fuzzer
varies that key (`inputs.generators.config_choices`).

- `patch14`: the whole pipeline runs with `patch_size = 14` (plan, patchify, grid);
- `merge2`: it pads to a multiple of 2 x patch whatever `merge_kernel_size` says;
- `mean_std_half`: it normalizes with mean = std = 0.5 whatever `image_mean`/`image_std` say;
- `tokens_from_grid`: an engine (a module-like object with `plan` and `preprocess`) whose planner
  counts tokens from the grid and ignores `fixed_output_tokens`; its `preprocess` is correct (the
  token count is no part of a result, so only the planner check can see it): `fuzz --planner`.

Usable from the CLI: `kimi-oracle fuzz --candidate tests/mutants/config_mutants.py:patch14` and
`kimi-oracle fuzz --planner tests/mutants/config_mutants.py:tokens_from_grid_plan`.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.result import PreprocessResult

try:  # imported as `mutants.config_mutants` by the tests, or by path from the CLI
    from mutants.planted import Pipeline
except ImportError:  # pragma: no cover - loaded by path without tests/ on sys.path
    import importlib.util
    import sys
    from pathlib import Path

    _spec = importlib.util.spec_from_file_location("_kimi_planted", Path(__file__).with_name("planted.py"))
    _planted = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _planted
    _spec.loader.exec_module(_planted)
    Pipeline = _planted.Pipeline


def _run_as(images: list[Image.Image], config: PreprocessConfig, **hard_coded) -> PreprocessResult:
    return Pipeline(dataclasses.replace(config, **hard_coded)).run(images)


def patch14(images: list[Image.Image], config: PreprocessConfig) -> PreprocessResult:
    """Hard-codes patch_size = 14."""
    return _run_as(images, config, patch_size=14)


def merge2(images: list[Image.Image], config: PreprocessConfig) -> PreprocessResult:
    """Hard-codes merge_kernel_size = 2."""
    return _run_as(images, config, merge_kernel_size=2)


def mean_std_half(images: list[Image.Image], config: PreprocessConfig) -> PreprocessResult:
    """Hard-codes image_mean = image_std = (0.5, 0.5, 0.5)."""
    return _run_as(images, config, image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5))


def tokens_from_grid_plan(width: int, height: int, config: PreprocessConfig) -> ResizePlan:
    """The engine's planner: the checkpoint's plan (without its side assert, as engines plan) but
    the token count always from the grid, `fixed_output_tokens` ignored."""
    return plan(width, height, dataclasses.replace(config, fixed_output_tokens=None), side_assert=False)


def _correct(images: list[Image.Image], config: PreprocessConfig) -> PreprocessResult:
    return Pipeline(config).run(images)


# An engine: `plan` and `preprocess` (spec `tests/mutants/config_mutants.py:tokens_from_grid`).
tokens_from_grid = SimpleNamespace(plan=tokens_from_grid_plan, preprocess=_correct)


@dataclasses.dataclass(frozen=True)
class ConfigMutant:
    """A planted constant: its function, the config key it ignores and the checks that may name it
    (`compare` checks grids, then feature length, then shape: a patch size of 14 for 16 gives
    other grids, or, when the grids happen to agree, patches of the wrong shape)."""

    name: str
    func: object
    key: str
    checks: tuple[str, ...]


CANDIDATE_MUTANTS = (
    ConfigMutant("patch14", patch14, "patch_size", ("grid_mismatch", "shape_dtype")),
    ConfigMutant("merge2", merge2, "merge_kernel_size", ("grid_mismatch",)),
    ConfigMutant("mean_std_half", mean_std_half, "image_mean", ("pixel_mismatch",)),
)
PLANNER_MUTANT = ConfigMutant("tokens_from_grid", tokens_from_grid_plan, "fixed_output_tokens",
                              ("planner_mismatch[num_tokens]",))
