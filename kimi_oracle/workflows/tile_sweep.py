"""Tile sizes of the GPU pipeline measured on a device: the benchmark inputs of the device check
run under each candidate `Tiles`, every launch timed alone (CUDA events, median), every output
compared with the reference byte for byte; then the best pass tile and tail block per warp
count, and the whole 220-image exactness check of the device check under the tiles chosen.

    python -m kimi_oracle.workflows.tile_sweep RESULTS_DIR            # on a CUDA machine
    python -m kimi_oracle.workflows.tile_sweep RESULTS_DIR --compile-only sm_90   # no GPU

`--compile-only ARCH` compiles the benchmark inputs' launches under each candidate for ARCH
(no GPU: `kimi-oracle gpu build`'s compiler) and reports registers and spills, so that a device
run can leave out the candidates that spill. Writes `tile_sweep.json` and `tile_sweep.md`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from kimi_oracle.core.files import atomic_write_many, to_json

# (pass_rows, pass_cols, tail, num_warps) tried. Within the build's 64-register target (measured
# with `--compile-only sm_90`: registers grow with the elements a thread holds, 2 per thread at
# the defaults): 512-pixel pass tiles of other shapes at 8 warps, 256-element tiles and blocks
# at 4 and 8 warps, 128 at 4. Two over it (16x64 pass tiles: 70 registers; 1024-element tail
# blocks: 95) say what the target costs. The convert kernel's block is not swept (the benchmark
# inputs launch none): 2 pixels a thread, `CONVERT_PER_WARP` per warp.
CANDIDATES = (
    (8, 64, 512, 8), (4, 128, 512, 8), (16, 32, 512, 8), (2, 256, 512, 8), (32, 16, 512, 8),
    (4, 64, 256, 8), (8, 32, 256, 8), (2, 128, 256, 8),
    (4, 64, 256, 4), (8, 32, 256, 4), (2, 128, 256, 4), (4, 32, 128, 4),
    (16, 64, 512, 8), (8, 64, 1024, 8),
)


CONVERT_PER_WARP = 64


def tiles_of(rows: int, cols: int, tail: int, warps: int):
    """The `Tiles` of one candidate (the convert block: `CONVERT_PER_WARP` pixels a warp)."""
    from kimi_oracle.pipelines.gpu.tiles import Tiles

    return Tiles(pass_rows=rows, pass_cols=cols, tail=tail, convert=CONVERT_PER_WARP * warps, num_warps=warps)


def candidates() -> list:
    """The candidate `Tiles` (`CANDIDATES`)."""
    return [tiles_of(*c) for c in CANDIDATES]


def _label(tiles) -> str:
    return f"pass {tiles.pass_rows}x{tiles.pass_cols}, tail {tiles.tail}, warps {tiles.num_warps}"


def compile_only(arch: str) -> list[dict[str, Any]]:
    """Registers and spills of the benchmark inputs' launches under every candidate, for `arch`
    (each candidate compiled with a fresh Triton cache: a cached kernel is not compiled again,
    and ptxas then reports nothing)."""
    import tempfile

    from kimi_oracle.workflows.device_check import benchmark_cases

    inputs = benchmark_cases()
    rows: list[dict[str, Any]] = []
    before = os.environ.get("TRITON_CACHE_DIR")
    try:
        for tiles in candidates():
            with tempfile.TemporaryDirectory(prefix="kimi-tile-sweep-") as cache:
                os.environ["TRITON_CACHE_DIR"] = cache
                rows += _compiled_rows(tiles, arch, inputs)
    finally:
        if before is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = before
    return rows


def _compiled_rows(tiles, arch: str, inputs: dict) -> list[dict[str, Any]]:
    from kimi_oracle.pipelines.gpu import build
    from kimi_oracle.pipelines.gpu.pipeline import launch_plan

    seen: dict = {}
    for imgs, cfg in inputs.values():
        for launch in launch_plan(imgs[:1], cfg, tiles=tiles)[0]:
            seen.setdefault((launch.kernel_name, launch.specialization), launch)
    rows = []
    for launch in seen.values():
        rec = build.compile_launch(launch, arch)
        rows.append({"tiles": _label(tiles), "kernel": launch.kernel_name, "specialization": launch.specialization,
                     "registers": rec["registers"], "spilled_bytes": rec["spilled_bytes"], "error": rec["error"]})
    return rows


def _measure(tiles, inputs: dict, expected: dict) -> dict[str, Any]:
    """Each input under `tiles`: per-launch device seconds, the total, and exactness."""
    import torch

    from kimi_oracle.pipelines.gpu.pipeline import prepare_launches
    from kimi_oracle.workflows.device_check import _launch_registers, _time_cuda, compared

    out: dict[str, Any] = {"tiles": dataclasses.asdict(tiles), "label": _label(tiles), "inputs": {}}
    for label, (imgs, cfg) in inputs.items():
        launches, _stats, finish = prepare_launches(imgs, cfg, device="cuda", tiles=tiles)
        per = []
        for launch in launches:
            per.append({"kernel": launch.kernel_name, "specialization": launch.specialization,
                        "device_s": _time_cuda(launch), "on_device": _launch_registers(launch)})
        out["inputs"][label] = {"launches": per, "device_s": sum(p["device_s"] for p in per),
                                **compared(finish(), expected[label])}
        del launches, finish
        torch.cuda.empty_cache()
    return out


def _paths(inputs: dict, expected: dict) -> dict[str, Any]:
    """At the default tiles: `preprocess`, and `prepare_launches` run once, against the reference."""
    from kimi_oracle.pipelines.gpu import preprocess
    from kimi_oracle.pipelines.gpu.pipeline import prepare_launches
    from kimi_oracle.workflows.device_check import compared

    out = {}
    for label, (imgs, cfg) in inputs.items():
        launches, _stats, finish = prepare_launches(imgs, cfg, device="cuda")
        for launch in launches:
            launch()
        out[label] = {"prepare_launches": compared(finish(), expected[label]),
                      "preprocess": compared(preprocess(imgs, cfg, device="cuda"), expected[label])}
    return out


def _best(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per warp count: the pass tile with the least pass time and the tail block with the least
    tail time over all inputs, among candidates exact on every input whose every launch the
    driver reports within the build's register target and without spills; the warp count with
    the least sum."""
    from kimi_oracle.pipelines.gpu.build import MAX_REGISTERS

    def kernel_time(res: dict, kernel: str) -> float:
        return sum(p["device_s"] for row in res["inputs"].values() for p in row["launches"] if p["kernel"] == kernel)

    def within(launch: dict) -> bool:  # registers read from the driver, within the target
        dev = launch["on_device"]
        return dev is not None and dev.get("registers") is not None and dev["registers"] <= MAX_REGISTERS \
            and dev.get("spills") == 0

    exact = [r for r in results if all(row["exact"] and all(within(p) for p in row["launches"])
                                       for row in r["inputs"].values())]
    picks = {}
    for warps in sorted({r["tiles"]["num_warps"] for r in exact}):
        mine = [r for r in exact if r["tiles"]["num_warps"] == warps]
        p = min(mine, key=lambda r: kernel_time(r, "resample_pass_kernel"))
        t = min(mine, key=lambda r: kernel_time(r, "tail_kernel"))
        picks[warps] = {"pass": (p["tiles"]["pass_rows"], p["tiles"]["pass_cols"]), "tail": t["tiles"]["tail"],
                        "seconds": kernel_time(p, "resample_pass_kernel") + kernel_time(t, "tail_kernel")}
    if not picks:
        return {}
    warps = min(picks, key=lambda w: picks[w]["seconds"])
    return {"num_warps": warps, **picks[warps], "per_warps": picks}


SHORT_SWEEP_INPUTS = 2  # the tile sweep's short form: the first benchmark inputs ...
SHORT_SWEEP_CANDIDATES = 3  # ... under the first candidates (`CANDIDATES`)


def short_form(results: dict) -> None:
    """The tile sweep's short form, a step of the device check: a few candidate tiles on the first
    benchmark inputs, each launch timed, each output compared with the reference."""
    from kimi_oracle.pipelines import reference
    from kimi_oracle.workflows.device_check import benchmark_cases

    inputs = dict(list(benchmark_cases().items())[:SHORT_SWEEP_INPUTS])
    expected = {label: reference.preprocess(imgs, cfg) for label, (imgs, cfg) in inputs.items()}
    from kimi_oracle.pipelines.gpu.tiles import CUDA_TILES

    measured = [_measure(tiles, inputs, expected)  # (the default tiles first: the baseline)
                for tiles in (CUDA_TILES, *candidates()[:SHORT_SWEEP_CANDIDATES])]
    results["tile_sweep"] = {"inputs": list(inputs), "candidates": [
        {"label": m["label"], "device_s": {k: v["device_s"] for k, v in m["inputs"].items()},
         "exact": all(v["exact"] for v in m["inputs"].values())} for m in measured]}


def sweep(outdir: Path) -> int:
    """On CUDA: every candidate measured, the best chosen, the exactness check run under it."""
    from kimi_oracle.pipelines import reference
    from kimi_oracle.pipelines.gpu.tiles import CUDA_TILES
    from kimi_oracle.workflows import device_check

    inputs = device_check.benchmark_cases()
    expected = {label: reference.preprocess(imgs, cfg) for label, (imgs, cfg) in inputs.items()}
    results: dict[str, Any] = {"versions": device_check.versions(), "default": _label(CUDA_TILES), "candidates": []}
    results["paths"] = _paths(inputs, expected)
    print(to_json(results["paths"]), flush=True)
    t0 = time.time()
    for tiles in candidates():
        results["candidates"].append(_measure(tiles, inputs, expected))
        print(f"{time.time() - t0:6.1f} s  {_label(tiles)}", flush=True)
        write(results, outdir)
    best = results["best"] = _best(results["candidates"])
    if best:
        chosen = tiles_of(best["pass"][0], best["pass"][1], best["tail"], best["num_warps"])
        results["chosen"] = _label(chosen)
        results["chosen_measured"] = _measure(chosen, inputs, expected)
        ex: dict[str, Any] = {}
        device_check.exactness(ex, tiles=chosen)
        results["chosen_exactness"] = ex["exactness"]
    write(results, outdir)
    return 0 if sweep_passed(results) else 1


def sweep_passed(results: dict[str, Any]) -> bool:
    """A choice was made, and everything compared is exact: both paths at the default tiles, the
    chosen tiles on every benchmark input, and the 220 images and mixed batches under them."""
    from kimi_oracle.workflows.device_check import exact_everywhere

    paths = results.get("paths", {})
    measured = results.get("chosen_measured", {}).get("inputs", {})
    return (bool(results.get("best")) and bool(paths) and bool(measured)
            and all(v["exact"] for row in paths.values() for v in row.values())
            and all(row["exact"] for row in measured.values())
            and exact_everywhere(results["chosen_exactness"]))


def _table(results: dict[str, Any]) -> list[str]:
    rows = results.get("candidates", [])
    if not rows:
        return []
    labels = list(rows[0]["inputs"])
    lines = ["| tiles | " + " | ".join(f"{lb} (µs: pass + tail)" for lb in labels) + " | exact |",
             "|---|" + "---|" * len(labels) + "---|"]
    for r in rows:
        cells = []
        for lb in labels:
            row = r["inputs"][lb]
            parts = {k: sum(p["device_s"] for p in row["launches"] if p["kernel"] == k) * 1e6
                     for k in ("resample_pass_kernel", "tail_kernel")}
            cells.append(f"{row['device_s'] * 1e6:.1f} ({parts['resample_pass_kernel']:.1f} + {parts['tail_kernel']:.1f})")
        lines.append(f"| {r['label']} | " + " | ".join(cells) + f" | {all(x['exact'] for x in r['inputs'].values())} |")
    return lines


def write(results: dict[str, Any], outdir: Path) -> None:
    """tile_sweep.json and tile_sweep.md, written together."""
    outdir.mkdir(parents=True, exist_ok=True)
    lines = ["# GPU tile sweep", "", f"- default: {results.get('default')}", f"- device: {results.get('versions', {}).get('device')}", ""]
    lines += _table(results)
    if results.get("best"):
        lines += ["", f"- best: {results['best']}", f"- chosen: {results.get('chosen')}"]
    if results.get("chosen_exactness"):
        ex = results["chosen_exactness"]
        lines.append(f"- exactness under the chosen tiles: {ex['bit_identical']} / {ex['images']} images, batches {ex['batches_identical']}")
    for r in results.get("compile_only", []):
        lines.append(f"- {r['tiles']}: {r['kernel']} [{r['specialization']}] registers {r['registers']}, "
                     f"spilled {r['spilled_bytes']}{', error ' + r['error'] if r['error'] else ''}")
    atomic_write_many({outdir / "tile_sweep.json": to_json(results), outdir / "tile_sweep.md": "\n".join(lines) + "\n"})


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--compile-only"):
        print("usage: python -m kimi_oracle.workflows.tile_sweep RESULTS_DIR [--compile-only ARCH]", file=sys.stderr)
        return 2
    outdir = Path(argv[0])
    if len(argv) == 3:
        os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
        os.environ.pop("TRITON_INTERPRET", None)
        rows = compile_only(argv[2])
        write({"compile_only": rows}, outdir)
        from kimi_oracle.pipelines.gpu.build import MAX_REGISTERS

        bad = [r for r in rows if r["error"] or r["spilled_bytes"] or (r["registers"] or 0) > MAX_REGISTERS]
        return 1 if bad else 0
    return sweep(outdir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
