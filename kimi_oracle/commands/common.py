"""Options and helpers shared by several subcommands."""

from __future__ import annotations

from pathlib import Path

import click

from ..config import PROFILES, PreprocessConfig
from ..errors import ConfigError


def profile_options(func):
    """Add `--profile k3|k25` and `--config FILE` (mutually exclusive)."""
    func = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="A checkpoint's preprocessor_config.json (overrides --profile).",
    )(func)
    func = click.option(
        "--profile",
        type=click.Choice(PROFILES),
        default=None,
        help="Built-in profile (default: k3; k3-small is K3 with a 16-patch budget).",
    )(func)
    return func


def resolve_config(profile: str | None, config_path: Path | None) -> PreprocessConfig:
    """The configuration chosen by `--profile` / `--config`."""
    if profile and config_path:
        raise ConfigError("--config", "give either --profile or --config, not both")
    if config_path is not None:
        return PreprocessConfig.from_hf_json(config_path)
    return PreprocessConfig.profile(profile or "k3")
