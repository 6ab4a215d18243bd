"""`kimi-oracle engines`: the built-in real engines, their paths, where each would load from."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kimi_oracle.core.errors import EXIT_OK


def register(group: click.Group) -> None:
    """Attach `engines` to the CLI group."""

    @group.command("engines")
    @click.option("--json", "as_json", is_flag=True, help="One JSON list instead of the text table.")
    @click.option("--prune", "prune_spec", default=None, metavar="ENGINE@SOURCE",
                  help="Instead: copy only the files the engine's adapter loads (SGLang, LMDeploy) into --out, "
                       "to carry to a machine without a registry (at most 10 MB); then ENGINE@OUT loads it.")
    @click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="With --prune: the new directory.")
    def engines_cmd(as_json: bool, prune_spec: str | None = None, out_dir: Path | None = None) -> int:
        """List the built-in engines (sglang, transformers, vllm, paddleformers, mlx-vlm, lmdeploy)
        and their paths: the file and function each calls, whether it is adapted, the version
        installed here (ENGINE alone loads it) or why it cannot load, and what each engine lacks;
        then the engines with nothing to adapt (NeMo Automodel, smg) and why. ENGINE@VERSION,
        @WHEEL or @DIR loads another tree."""
        if prune_spec is not None or out_dir is not None:
            if prune_spec is None or out_dir is None:
                raise click.UsageError("--prune ENGINE@SOURCE and --out DIR go together")
            from kimi_oracle.adapters.prune import prune

            root, size = prune(prune_spec, out_dir)
            click.echo(f"pruned {prune_spec}: {root} ({size} bytes); load it as {prune_spec.split('@')[0]}@{root}")
            return EXIT_OK
        from kimi_oracle.adapters.engines import describe_engines
        from kimi_oracle.adapters.sources import cache_dir

        rows = describe_engines()
        if as_json:
            click.echo(json.dumps(rows, indent=1))
            return EXIT_OK
        click.echo(f"release cache (ENGINE@VERSION): {cache_dir()}")
        said: set[str] = set()
        for row in rows:
            if row["role"] == "none":  # an engine with nothing to adapt
                click.echo(f"{row['engine']:<14} nothing to adapt ({', '.join(row['known_versions'])}): {row['lacks']}")
                continue
            if row.get("lacks") and row["engine"] not in said:
                said.add(row["engine"])
                click.echo(f"{row['engine']:<14} lacks: {row['lacks']}")
            state = "adapted" if row["adapted"] else ("none" if row["file"] == "-" else "not adapted yet")
            version = row["version"] or "-"
            click.echo(f"{row['path']:<14} {row['role']:<15} {row['function']} in {row['file']} [{state}]; "
                       f"here: {version} from {row['loads_from']}, on {row['device']}; "
                       f"knows {', '.join(row['known_versions'])}")
        return EXIT_OK
