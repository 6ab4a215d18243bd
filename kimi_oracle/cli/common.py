"""Options and helpers shared by several subcommands."""

from __future__ import annotations

import re
from pathlib import Path

import click

from kimi_oracle.core.config import PROFILES, PreprocessConfig


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
    return PreprocessConfig.resolve(profile, config_path)


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|min|m|h)?")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds from `90`, `90s`, `10m`, `1.5h`, `1h30m`; a clear usage error otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        raw = str(text).strip().lower().replace(" ", "")
        parts = list(_DURATION.finditer(raw))
        if not raw or "".join(p.group(0) for p in parts) != raw:
            raise click.BadParameter(f"{text!r}: expected a duration such as 90s, 10m, 1.5h or 1h30m")
        value = sum(float(p.group(1)) * _UNITS[p.group(2)] for p in parts)
    if not value > 0:
        raise click.BadParameter(f"{text!r}: the duration must be positive")
    return value


def parse_percent(text: str | float) -> float:
    """Percent from `10%` or `10`."""
    raw = str(text).strip().rstrip("%")
    try:
        value = float(raw)
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected a percentage such as 10%") from None
    if value < 0:
        raise click.BadParameter(f"{text!r}: the percentage must not be negative")
    return value
