"""`kimi-oracle bench`: run the benchmark suite, save it, compare it with a stored run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from kimi_oracle.core.errors import EXIT_FINDINGS, EXIT_OK, KimiOracleError
from kimi_oracle.workflows.bench import (
    BENCH_INPUTS,
    ROOFLINE_DEVICES,
    compare_medians,
    load_benchmark_json,
    roofline,
    select_inputs,
)

DEFAULT_STORAGE = Path(".benchmarks")


def suite_dir() -> Path:
    """tests/benchmarks of the checkout this package runs from."""
    here = Path(__file__).resolve().parents[2] / "tests" / "benchmarks"
    if not (here / "test_benchmarks.py").is_file():
        raise KimiOracleError(
            f"benchmark suite not found at {here}: `kimi-oracle bench` runs from a source checkout "
            "(pip install -e .)"
        )
    return here


def run_suite(candidates: list[str], quick: bool, json_out: Path, inputs: list[str] | None = None,
              targets: bool = False) -> int:
    """Run tests/benchmarks under pytest-benchmark; returns pytest's exit code. The project's own
    speed targets (marked `targets`: the reference against its floor, the fuzzer's rates) only
    with `targets`: they measure this tool, not a candidate, and take minutes."""
    cmd = [
        sys.executable, "-m", "pytest", str(suite_dir()), "-m", "bench" if targets else "bench and not targets",
        "--benchmark-enable",
        f"--benchmark-json={json_out}", "--kimi-bench-candidates", ",".join(candidates),
        "-p", "no:cacheprovider", "-q", "--benchmark-columns=min,median,max,rounds",
    ]
    if quick:
        cmd.append("--kimi-bench-quick")
    if inputs:
        cmd += ["--kimi-bench-inputs", ",".join(inputs)]
    # Never a worker of a parallel test run (pytest-xdist): pytest-benchmark switches itself off
    # in one, and a `bench` started from inside such a run (its own test) would measure nothing.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    cmd[3:3] = ["-p", "no:xdist"]
    return subprocess.call(cmd, cwd=str(suite_dir().parents[1]), env=env)


def _resolve_baseline(name_or_file: str, storage: Path) -> Path:
    path = Path(name_or_file)
    if path.is_file():
        return path
    stored = storage / f"{name_or_file}.json"
    if stored.is_file():
        return stored
    raise KimiOracleError(f"no stored benchmark run {name_or_file!r} (looked for {path} and {stored})")


def _print_comparison(rows, threshold) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="benchmark comparison (median seconds)", title_justify="left")
    for col in ("benchmark", "baseline", "current", "change", "verdict"):
        table.add_column(col)
    for r in rows:
        fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        change = "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%"
        verdict = "[red]SLOWER[/red]" if r["failed"] else "ok"
        table.add_row(escape(r["name"]), fmt(r["baseline_s"]), fmt(r["current_s"]), change, verdict)
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    if threshold is not None:
        click.echo(f"threshold: a benchmark fails when its median is more than {threshold:g}% slower")


def _print_roofline(names: list[str]) -> None:
    """Per benchmark input: the bytes each GPU launch must move and its floor at the peak
    bandwidth of ROOFLINE_DEVICES (a GPU figure reads as a share of this floor)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="GPU roofline: bytes each launch must move, and its time floor", title_justify="left")
    for col in ("input", "launch", "programs", "MB", *(f"{d} floor µs" for d, _ in ROOFLINE_DEVICES)):
        table.add_column(col)
    for name in names:
        try:
            roof = roofline(BENCH_INPUTS[name].images(), BENCH_INPUTS[name].config())
        except KimiOracleError as exc:
            click.echo(f"roofline of {name}: unavailable ({exc})")
            continue
        for launch in roof["launches"]:
            table.add_row(escape(name), escape(f"{launch['kernel']} [{launch['specialization']}]"),
                          str(launch["programs"]), f"{launch['bytes'] / 1e6:.2f}",
                          *(f"{launch['floor_s'][d] * 1e6:.1f}" for d, _ in ROOFLINE_DEVICES))
        table.add_row(escape(name), "[b]all launches[/b]", "", f"{roof['bytes'] / 1e6:.2f}",
                      *(f"{roof['floor_s'][d] * 1e6:.1f}" for d, _ in ROOFLINE_DEVICES))
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    click.echo("floors: " + ", ".join(f"{d} at {peak / 1e12:g} TB/s" for d, peak in ROOFLINE_DEVICES)
               + "; sources read once, outputs written once, small tables not counted")


def register(group: click.Group) -> None:
    """Attach `bench` to the CLI group."""

    @group.command("bench")
    @click.option("--candidate", "candidates", multiple=True,
                  help="Candidate spec to benchmark (repeatable; default: reference, eager, gpu).")
    @click.option("--quick", is_flag=True, help="Fewer inputs and rounds (a CPU run stays under 2 minutes).")
    @click.option("--input", "inputs", multiple=True, type=click.Choice(sorted(BENCH_INPUTS)),
                  help="Only this benchmark input (repeatable; default: all, or the quick set).")
    @click.option("--targets", is_flag=True,
                  help="Also run this tool's own speed targets (the reference against its floor, the fuzzer's "
                       "rates; several minutes).")
    @click.option("--save", "save_name", default=None, help="Store this run as NAME under --storage.")
    @click.option("--compare", "compare_to", default=None, help="Stored run NAME or a pytest-benchmark JSON file.")
    @click.option("--fail-above", type=float, default=None, help="Exit 1 when a median is more than PCT % slower.")
    @click.option("--storage", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_STORAGE,
                  show_default=True, help="Directory of saved runs.")
    def bench_cmd(candidates, quick, inputs, targets, save_name, compare_to, fail_above, storage) -> int:
        """Run the benchmark suite (pytest-benchmark JSON with machine information)."""
        from kimi_oracle.oracle.candidates import load_candidate  # here: `--help` imports no torch

        specs = list(candidates) or ["reference", "eager", "gpu"]
        for spec in specs:
            if spec != "gpu":  # without CUDA the gpu rows are skipped, by design
                load_candidate(spec)  # a broken spec is a usage error (exit 2), not a skipped row
        baseline = _resolve_baseline(compare_to, storage) if compare_to else None
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "bench.json"
            code = run_suite(specs, quick, out, list(inputs), targets=targets)
            if not out.is_file():
                raise KimiOracleError(f"the benchmark suite produced no results (pytest exit {code})")
            if save_name:
                storage.mkdir(parents=True, exist_ok=True)
                target = storage / f"{save_name}.json"
                partial = target.with_suffix(".json.tmp")
                shutil.copyfile(out, partial)
                os.replace(partial, target)
                click.echo(f"saved: {target}")
            if code not in (0, 1):
                # pytest's own errors (2 interrupted/usage, 3 internal, 4 usage, 5 no tests) are
                # harness errors, not a slower kernel.
                raise KimiOracleError(f"the benchmark suite did not run cleanly (pytest exit {code})")
            failed = code != 0
            if baseline is not None:
                rows, slower = compare_medians(load_benchmark_json(out), load_benchmark_json(baseline), fail_above)
                _print_comparison(rows, fail_above)
                failed |= slower
        _print_roofline(list(inputs) or [b.name for b in select_inputs(quick)])
        return EXIT_FINDINGS if failed else EXIT_OK
