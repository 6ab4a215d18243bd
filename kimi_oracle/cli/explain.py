"""`kimi-oracle explain`: what the checkpoint does to each image, and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from kimi_oracle.cli.common import profile_options, resolve_config
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import EXIT_ERROR, EXIT_OK, InputError
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.images import alpha_class, decode, has_alpha, resample_kind
from kimi_oracle.core.text import rich_text


def explain_image(source: Any, config: PreprocessConfig, name: str | None = None) -> dict[str, Any]:
    """A JSON-ready description of how one image is preprocessed under `config`."""
    img = decode(source, name=name)
    p = plan(img.width, img.height, config)
    bg = config.transparent_bg_config
    stage = config.fill_stage
    alpha = has_alpha(img)
    if bg is None:
        background = "none: converted to RGB, alpha dropped" if alpha else "none: converted to RGB"
    elif img.mode == "RGB":
        background = "none: already RGB (unchanged)"
    elif not alpha:
        background = "none: opaque, converted to RGB"
    else:
        background = f"{bg.pattern} background composited {stage.replace('_', ' ')}"
    resize_mode = "RGB" if stage == "before_resize" else img.mode
    path = resample_kind(resize_mode, img.size, (p.new_w, p.new_h))
    return {
        "image": name or str(source),
        "width": img.width,
        "height": img.height,
        "mode": img.mode,
        "alpha": alpha_class(img),
        "new_w": p.new_w,
        "new_h": p.new_h,
        "pad_w": p.pad_w,
        "pad_h": p.pad_h,
        "grid_thw": list(p.grid_thw),
        "num_tokens": p.num_tokens,
        "resize_mode": resize_mode,
        "resample": path,
        "background": background,
    }


def register(group: click.Group) -> None:
    """Attach `explain` to the CLI group."""

    @group.command("explain")
    @click.argument("images", nargs=-1, required=True, type=click.Path(path_type=Path))
    @profile_options
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
    def explain(images: tuple[Path, ...], profile: str | None, config_path: Path | None, as_json: bool) -> int:
        """Print size, mode, alpha class, plan, resample path and background fill per image."""
        config = resolve_config(profile, config_path)
        rows: list[dict[str, Any]] = []
        errors: list[str] = []
        for path in images:
            try:
                rows.append(explain_image(path, config, name=str(path)))
            except InputError as exc:
                errors.append(str(exc))
        if as_json:
            click.echo(json.dumps({"config": config.to_hf_json(), "profile": config.name, "images": rows,
                                   "errors": errors}, indent=2))
        else:
            _print_table(config, rows)
        for line in errors:
            click.echo(f"error: {line}", err=True)
        return EXIT_ERROR if errors else EXIT_OK


def _print_table(config: PreprocessConfig, rows: list[dict[str, Any]]) -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 140)
    table = Table(title=rich_text(f"kimi-oracle explain ({config.describe()})"), title_justify="left")
    for column in ("image", "size", "mode", "alpha", "resize to", "pad", "grid", "tokens", "resample", "background"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(
            rich_text(Path(r["image"]).name),
            f"{r['width']}x{r['height']}",
            rich_text(r["mode"]),
            rich_text(r["alpha"]),
            f"{r['new_w']}x{r['new_h']}",
            f"+{r['pad_w']} +{r['pad_h']}",
            "x".join(str(v) for v in r["grid_thw"]),
            str(r["num_tokens"]),
            f"{r['resample']} ({r['resize_mode']})",
            rich_text(r["background"]),
        )
    if rows:
        console.print(table)
