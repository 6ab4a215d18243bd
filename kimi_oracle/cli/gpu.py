"""`kimi-oracle gpu build`: compile every kernel specialization of the GPU pipeline ahead of
time for real GPU architectures (no GPU needed), with registers, spills and occupancy."""

from __future__ import annotations

from pathlib import Path

import click

from kimi_oracle.cli.common import out_dir_callback
from kimi_oracle.core.errors import EXIT_FINDINGS, EXIT_OK


def register(group: click.Group) -> None:
    """Attach `gpu` (and `gpu build`) to the CLI group."""

    @group.group("gpu")
    def gpu_group() -> None:
        """Tools for the Triton GPU pipeline that need no GPU."""

    @gpu_group.command("build")
    @click.option("--arch", "arch", default="sm_90,sm_80", show_default=True,
                  help="Comma-separated architectures: sm_90 (H100/H200), sm_80 (A100).")
    @click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
                  callback=out_dir_callback, help="Folder for build.json and build.md.")
    @click.option("--sample", is_flag=True, default=False,
                  help="Compile only a sample holding every (code path, field value) pair "
                       "of each kernel (about a third; the default suite's build).")
    def build_cmd(arch: str, out: Path, sample: bool) -> int:
        """Compile every specialization the pipeline launches; exit 1 on a compile error, a
        spill, or more than 64 registers per thread."""
        from kimi_oracle.pipelines.gpu.build import MAX_REGISTERS, build, parse_archs

        archs = parse_archs(arch)
        records, bad = build(archs, out, sample=sample)
        for a in archs:
            rows = [r for r in records if r["arch"] == a and not r.get("error")]
            if rows:
                regs = [r["registers"] for r in rows]
                click.echo(f"{a}: {sum(r['arch'] == a for r in records)} specializations, registers "
                           f"{min(regs)}-{max(regs)} (target <= {MAX_REGISTERS}), spilled bytes "
                           f"{max(r['spilled_bytes'] for r in rows)}, lowest theoretical occupancy "
                           f"{100 * min(r['occupancy'] for r in rows):.1f} %")
        for line in bad:
            click.echo(f"FAIL {line}", err=True)
        click.echo(f"wrote {out / 'build.json'} and {out / 'build.md'}")
        return EXIT_FINDINGS if bad else EXIT_OK
