"""`kimi-oracle engines`: the built-in real engines, their paths, where each would load from."""

from __future__ import annotations

import json

import click

from kimi_oracle.core.errors import EXIT_OK


def register(group: click.Group) -> None:
    """Attach `engines` to the CLI group."""

    @group.command("engines")
    @click.option("--json", "as_json", is_flag=True, help="One JSON list instead of the text table.")
    def engines_cmd(as_json: bool) -> int:
        """List the built-in engines (sglang, transformers, vllm, paddleformers, mlx-vlm, lmdeploy)
        and their paths: the file and function each calls, whether it is adapted, the version
        installed here (ENGINE alone loads it) or why it cannot load, and what each engine lacks;
        then the engines with nothing to adapt (NeMo Automodel, smg) and why. ENGINE@VERSION,
        @WHEEL or @DIR loads another tree."""
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
                       f"here: {version} from {row['loads_from']}; knows {', '.join(row['known_versions'])}")
        return EXIT_OK
