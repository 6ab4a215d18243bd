"""`kimi-oracle merge`: one report from the outputs of nightly shards (workflows.nightly.merge)."""

from __future__ import annotations

from pathlib import Path

import click

from kimi_oracle.cli.common import out_dir_callback


@click.command("merge")
@click.argument("shards", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              callback=out_dir_callback,
              help="Folder for the merged summary.json, summary.md, junit.xml, findings/, corpus/, hypothesis-db/.")
@click.option("--allow-mixed", is_flag=True, default=False,
              help="Merge shards of different candidates, profiles, configs or tolerances (said in the notes).")
@click.option("--replace", is_flag=True, default=False, help="Replace a non-empty --out (refused otherwise).")
@click.option("--no-minimize", "no_minimize", is_flag=True, default=False,
              help="Keep the union of the shards' corpora as it is (default: libFuzzer's -merge=1 keeps the "
                   "inputs that hold its coverage).")
def merge_cmd(shards: tuple[Path, ...], out_dir: Path, allow_mixed: bool, replace: bool,
              no_minimize: bool = False) -> None:
    """Merge the --out folders of nightly shards (CI matrix jobs, machines, nights) into one report.

    Findings are de-duplicated by their key, the smallest reproducer kept; corpora and hypothesis
    databases are unioned (de-duplicated by content), and the corpora minimized by libFuzzer's own
    -merge=1 (the reference on both sides: no candidate code runs). Every input is checked first: a shard of
    another candidate, profile, config or tolerance (unless --allow-mixed), another summary
    schema, a truncated JSON or a finding folder that fails `repro`'s checks is exit 2, naming the
    file, with nothing written. Exit 0 nothing found, 1 findings, 2 bad input or a shard's harness
    errors.
    """
    from kimi_oracle.workflows.nightly.merge import merge_shards

    result = merge_shards(list(shards), out_dir, allow_mixed=allow_mixed, replace=replace,
                          minimize=not no_minimize)
    s = result.summary
    for note in s["notes"]:
        click.echo(f"note: {note}", err=True)
    for f in s["findings"]:
        found_in = len(f.get("found_in") or [])
        click.echo(f"  {f['kind']:<15} {f['engine']:<10} {f['path']} (key {f['key']}, in {found_in} shard finding(s))")
    for err in s["errors"]:
        click.echo(f"error: {err.splitlines()[0] if err else err}", err=True)
    click.echo(f"{len(s['findings'])} finding(s) from {len(s['shards'])} shard(s); summary: {result.out / 'summary.md'}")
    raise SystemExit(result.exit_code)


def register(group: click.Group) -> None:
    """Attach `merge` to the CLI group."""
    group.add_command(merge_cmd)


__all__ = ["register"]
