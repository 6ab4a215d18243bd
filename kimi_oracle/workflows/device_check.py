"""On a CUDA machine: bit-exactness of the GPU pipeline against the reference, benchmarks read
against the roofline, and the ahead-of-time build for the device's own architecture.

Run through `scripts/device_check.sh RESULTS_DIR` (which checks versions first). Writes
`RESULTS_DIR/device_check.json`, `RESULTS_DIR/device_check.md` and `RESULTS_DIR/build/`
(build.json, build.md). Installs nothing.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kimi_oracle.core.files import atomic_write_many, to_json
from kimi_oracle.core.files import versions as core_versions
from kimi_oracle.workflows.bench import ROOFLINE_DEVICES, roofline
from kimi_oracle.workflows.device_workflows import workflow_lines
from kimi_oracle.workflows.device_floors import (copy_floors, is_tail_without_resampling, nominal_peak, shares,
                                                 target_lines, targets)

if TYPE_CHECKING:
    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.core.result import PreprocessResult


def versions() -> dict:
    """The library versions (`core.files.versions`), the CUDA device, and what is missing for
    the check: a CUDA device visible to torch, triton, Pillow 13.0.x, numpy."""
    out: dict = {**core_versions(), "missing": []}
    for key in ("torch", "triton", "numpy"):
        if out.get(key) is None:
            out["missing"].append(f"{key} (not installed)")
    pillow = out.get("Pillow")
    if pillow is None or not pillow.startswith("13.0"):
        out["missing"].append(f"Pillow 13.0.x (found {pillow}; bring a pillow==13.0.* wheel for Python {out['python']})")
    try:
        import torch

        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device"] = torch.cuda.get_device_name(0) if out["cuda_available"] else None
        if not out["cuda_available"]:
            out["missing"].append("a CUDA device visible to torch (torch.cuda.is_available() is False)")
    except Exception as exc:  # noqa: BLE001 - report any import failure
        out["missing"].append(f"torch ({exc})")
    return out


def _cases():
    """>= 200 generated images: real-world sizes at K3 limits, RGBA, every mode, small limits."""
    import numpy as np

    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.inputs.generators import MODES, CaseParams, alpha_patterns_for, make_image

    k3 = PreprocessConfig.k3()
    cases = []
    for (w, h) in [(1920, 1080), (4032, 3024), (7680, 4320)]:
        for mode, alpha in [("RGB", "opaque"), ("RGBA", "random"), ("RGBA", "checker")]:
            cases.append((k3, CaseParams(w, h, mode=mode, alpha=alpha, content="noise", seed=w + h)))
    rng = np.random.default_rng(2024)
    limits = (4, 16, 64, 256, 1024)
    while len(cases) < 220:
        mode = MODES[int(rng.integers(len(MODES)))]
        alphas = alpha_patterns_for(mode)
        alpha = alphas[int(rng.integers(len(alphas)))]
        w, h = int(rng.integers(1, 700)), int(rng.integers(1, 700))
        if rng.random() < 0.1:
            w, h = (int(rng.integers(1, 4)), int(rng.integers(400, 1200)))[:: 1 if rng.random() < 0.5 else -1]
        stage = "after_resize" if rng.random() < 0.6 else "before_resize"
        pattern = ("white", "black", "gray", "chessboard")[int(rng.integers(4))]
        cfg = dataclasses.replace(
            k3, in_patch_limit=int(limits[int(rng.integers(len(limits)))]),
            transparent_bg_fill_stage=stage,
            transparent_bg_config=dataclasses.replace(k3.transparent_bg_config, pattern=pattern),
        )
        if rng.random() < 0.1:
            cfg = dataclasses.replace(PreprocessConfig.k25(), in_patch_limit=cfg.in_patch_limit)
        content = ("flat", "noise", "gradient", "edges")[int(rng.integers(4))]
        cases.append((cfg, CaseParams(w, h, mode=mode, alpha=alpha, content=content, seed=len(cases))))
    return [(cfg, p, make_image(p)) for cfg, p in cases]


def exactness(results: dict, tiles=None) -> None:
    """GPU pipeline vs reference, one image at a time and in batches, torch.equal (`tiles`: the
    pipeline's tile sizes, None for its CUDA defaults)."""
    import torch

    from kimi_oracle.pipelines import reference
    from kimi_oracle.pipelines.gpu import preprocess

    cases = _cases()
    rows = []
    t0 = time.time()
    for cfg, params, img in cases:
        exp = reference.preprocess([img], cfg)
        try:
            seen = compared(preprocess([img], cfg, device="cuda", tiles=tiles), exp)
            same_grid, differing, err = seen["grid_equal"], seen["differing_values"], None
        except Exception as exc:  # noqa: BLE001 - record and continue
            same_grid, differing, err = False, -1, f"{type(exc).__name__}: {exc}"
        rows.append({"case": params.describe(), "config": cfg.describe(), "grid_equal": same_grid,
                     "differing_values": differing, "error": err})
    # batches mixing sizes and modes equal one-by-one (same config per batch)
    by_cfg: dict = {}
    for cfg, params, img in cases[9:]:
        by_cfg.setdefault(repr(cfg), (cfg, []))[1].append(img)
    batch_ok = 0
    batch_total = 0
    for cfg, imgs in by_cfg.values():
        if len(imgs) < 2:
            continue
        batch_total += 1
        exp = reference.preprocess(imgs, cfg)
        got = preprocess(imgs, cfg, device="cuda", chunk_bytes=1 << 20, tiles=tiles)
        batch_ok += int(torch.equal(got.pixel_values.cpu(), exp.pixel_values) and torch.equal(got.grid_thws, exp.grid_thws))
    results["exactness"] = {
        "images": len(rows),
        "bit_identical": sum(1 for r in rows if r["grid_equal"] and r["differing_values"] == 0),
        "failures": [r for r in rows if not (r["grid_equal"] and r["differing_values"] == 0)],
        "batches_identical": f"{batch_ok}/{batch_total}",
        "batches": batch_total, "batches_ok": batch_ok,
        "seconds": round(time.time() - t0, 1),
    }


def _time_cuda(fn, iters: int = 20) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times)


def _launch_registers(launch) -> dict | None:
    """Registers and spills of the kernel the JIT compiled for this launch, from the driver."""
    try:
        kernel = launch.kernel.warmup(*launch.args, grid=(launch.grid,), **launch.constexprs, **launch.options)
        kernel._init_handles()
        return {"registers": int(kernel.n_regs), "spills": int(kernel.n_spills)}
    except Exception:  # noqa: BLE001 - a figure we can do without
        return None


def compared(got: "PreprocessResult", exp: "PreprocessResult") -> dict:
    """A GPU result against the reference's: `exact` (grids and values, torch.equal), the grids'
    equality, the count of differing values (-1 for another shape), the first grids of both."""
    import torch

    grids = bool(torch.equal(got.grid_thws.cpu(), exp.grid_thws))
    values = got.pixel_values.cpu()
    differing = int((values != exp.pixel_values).sum()) if values.shape == exp.pixel_values.shape else -1
    return {"exact": grids and differing == 0 and torch.equal(values, exp.pixel_values),
            "grid_equal": grids, "differing_values": differing,
            "got_grids": got.grid_thws.tolist()[:4], "expected_grids": exp.grid_thws.tolist()[:4]}


OUT_DTYPES = ("fp32", "bf16")  # every benchmark input is timed with both output types


def _torch_dtype(name: str):
    import torch

    return torch.bfloat16 if name == "bf16" else torch.float32


def benchmarks(results: dict) -> None:
    """Device time from the planes on the device to the finished output, per input and per
    launch, float32 and bfloat16 output, read as a share of the device's nominal peak and of what
    it sustains for a copy of the same bytes (`device_floors`), with the targets; vs the eager path."""
    import torch

    name = torch.cuda.get_device_name(0)
    entry, peak = nominal_peak(name)
    floors: dict[int, dict] = {}

    def floor(nbytes: int) -> dict:
        if nbytes not in floors:
            floors[nbytes] = copy_floors(nbytes, _time_cuda)
        return floors[nbytes]

    rows = [_benchmark_row(label, imgs, cfg, peak, dtype, floor)
            for label, (imgs, cfg) in benchmark_cases().items() for dtype in OUT_DTYPES]
    results["benchmarks"] = {"device": name, "hbm_peak_Bps": peak, "nominal_entry": entry, "rows": rows,
                             "targets": targets(rows)}


def benchmark_cases() -> dict[str, tuple[list, "PreprocessConfig"]]:
    """The benchmarked batches and their configs, by label (K3; a label naming 16384 runs with
    that patch budget)."""
    from kimi_oracle.core.config import PreprocessConfig

    k3 = PreprocessConfig.k3()
    return {label: (imgs, dataclasses.replace(k3, in_patch_limit=16384) if "16384" in label else k3)
            for label, imgs in _benchmark_inputs().items()}


def _benchmark_inputs() -> dict[str, list]:
    """The benchmarked batches, by label (a label naming 16384 runs with that patch budget)."""
    from kimi_oracle.inputs.generators import CaseParams, make_image

    return {
        "16 x 1920x1080 RGB (K3, no resampling)": [make_image(CaseParams(1920, 1080, "RGB", seed=i)) for i in range(16)],
        "1 x 7680x4320 RGB (K3, resampled)": [make_image(CaseParams(7680, 4320, "RGB", seed=1))],
        "1 x 7680x4320 RGBA (K3, resampled, premultiplied)": [make_image(CaseParams(7680, 4320, "RGBA", "random", seed=2))],
        "1 x 4032x3024 RGB (K3, no resampling)": [make_image(CaseParams(4032, 3024, "RGB", seed=3))],
        "4 x 4032x3024 RGB (K3 with in_patch_limit 16384, resampled)": [make_image(CaseParams(4032, 3024, "RGB", seed=4 + i)) for i in range(4)],
    }


def resampled(roof: dict) -> bool:
    """Whether a benchmark input's launches resample (a pass, or a tail that fetches by taps)."""
    return any(r["kernel"] == "resample_pass_kernel" or (r["kernel"] == "tail_kernel" and not
               is_tail_without_resampling(r)) for r in roof["launches"])


_REFERENCE: dict[str, "PreprocessResult"] = {}


def _reference_of(label: str, imgs: list, cfg: "PreprocessConfig") -> "PreprocessResult":
    """The reference's result of a benchmark input, computed once for both output types."""
    from kimi_oracle.pipelines import reference

    if label not in _REFERENCE:
        _REFERENCE[label] = reference.preprocess(imgs, cfg)
    return _REFERENCE[label]


def _eager_s(imgs: list, cfg: PreprocessConfig) -> float:
    """Device time of the eager path (`pipelines.eager`) on the same input, from device tensors."""
    from kimi_oracle.pipelines import eager

    tens, plans, alphas = eager.host_tensors(imgs, cfg)
    tens = [x.cuda() for x in tens]
    return _time_cuda(lambda: eager.from_tensors(tens, plans, alphas, cfg), iters=10)


def _benchmark_row(label: str, imgs: list, cfg: PreprocessConfig, peak: float | None, dtype: str = "fp32",
                   floor=None) -> dict:
    """One input's figures for one output type: host work, device time of all launches and of
    each (shares of the nominal peak and of the measured copy floor, `floor(nbytes)`), vs the
    eager path (float32 only)."""
    import torch

    from kimi_oracle.pipelines.gpu.pipeline import prepare_launches

    out_dtype = _torch_dtype(dtype)
    t = time.perf_counter()
    launches, stats, finish = prepare_launches(imgs, cfg, device="cuda", out_dtype=out_dtype)
    torch.cuda.synchronize()
    host_and_h2d = time.perf_counter() - t

    def run():
        for fn in launches:
            fn()

    dev_s = _time_cuda(run)
    roof = roofline(imgs, cfg, out_dtype)
    per_launch = []
    for launch, planned in zip(launches, roof["launches"]):
        launch_s = _time_cuda(launch)
        per_launch.append({**planned, "device_s": launch_s,
                           "share_of_floor": (planned["bytes"] / peak / launch_s) if peak else None,
                           "shares": shares(planned["bytes"], launch_s, peak, floor(planned["bytes"])) if floor else None,
                           "on_device": _launch_registers(launch)})
    # What was timed is checked: the launches' output (after all the timed runs) against the
    # reference (cast by Tensor.to for bfloat16), byte for byte (a benchmark of wrong work is
    # reported as such).
    expected = _reference_of(label, imgs, cfg)
    expected = dataclasses.replace(expected, pixel_values=expected.pixel_values.to(out_dtype))
    exact = compared(finish(), expected)["exact"]
    useful = stats["source_bytes"] + stats["output_bytes"]
    eager_s = _eager_s(imgs, cfg) if dtype == "fp32" else None
    return {
        "input": label,
        "out_dtype": dtype,
        "resampled": resampled(roof),
        "shares": shares(roof["bytes"], dev_s, peak, floor(roof["bytes"])) if floor else None,
        "exact": exact,
        "launches": stats["launches"],
        "host_prep_and_upload_s": round(host_and_h2d, 4),
        "device_s": dev_s,
        "source_bytes": stats["source_bytes"],
        "output_bytes": stats["output_bytes"],
        "roofline_bytes": roof["bytes"],
        "floor_s": roof["floor_s"],
        "floor_on_device_s": (roof["bytes"] / peak) if peak else None,
        "share_of_floor": (roof["bytes"] / peak / dev_s) if peak else None,
        "effective_GBps": useful / dev_s / 1e9,
        "pct_of_hbm_peak": (100.0 * roof["bytes"] / dev_s / peak) if peak else None,
        "per_launch": per_launch,
        "eager_device_s": eager_s,
        "speedup_vs_eager": (eager_s / dev_s) if eager_s else None,
    }


def aot_build(results: dict, outdir: Path) -> None:
    """The ahead-of-time build (kimi-oracle gpu build) for this device's architecture."""
    import torch

    from kimi_oracle.pipelines.gpu import build

    major, minor = torch.cuda.get_device_capability(0)
    arch = f"sm_{major}{minor}"
    if arch not in build.ARCHS:
        results["build"] = {"arch": arch, "skipped": f"no build target for {arch} (known: {', '.join(build.ARCHS)})"}
        return
    records, bad = build.build([arch], outdir / "build")
    ok = [r for r in records if not r.get("error")]
    results["build"] = {
        "arch": arch, "specializations": len(records), "failures": bad,
        "registers": [min(r["registers"] for r in ok), max(r["registers"] for r in ok)] if ok else None,
        "lowest_occupancy": min(r["occupancy"] for r in ok) if ok else None,
    }


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def _benchmark_lines(bm: dict | None) -> list[str]:
    """The benchmarks' tables (per input and output type, per launch) and the targets."""
    if not bm:
        return []
    floors = " | ".join(f"{d} floor µs" for d, _ in ROOFLINE_DEVICES)
    lines = ["", f"## Benchmarks on {bm['device']}", "",
             "Roofline: bytes each launch must move (sources read once, outputs written once); share of "
             f"floor = (bytes / this device's nominal peak, {bm.get('nominal_entry') or 'unknown'}: "
             f"{(bm.get('hbm_peak_Bps') or 0) / 1e12:.3g} TB/s) / measured device time; share of copy = the "
             "time this device takes to copy the same bytes (torch, Triton: the faster) / measured time.", "",
             f"| input | out | launches | host+H2D s | device s | roofline MB | {floors} | share of floor | share of copy "
             "| eager s | speedup | output exact |",
             "|---|---|---|---|---|---|" + "---|" * len(ROOFLINE_DEVICES) + "---|---|---|---|---|"]
    for r in bm["rows"]:
        fl = " | ".join(f"{r['floor_s'][d] * 1e6:.1f}" for d, _ in ROOFLINE_DEVICES)
        eager = "-" if r.get("eager_device_s") is None else f"{r['eager_device_s']:.6f}"
        speed = "-" if r.get("speedup_vs_eager") is None else f"{r['speedup_vs_eager']:.1f}x"
        lines.append(f"| {r['input']} | {r.get('out_dtype', 'fp32')} | {r['launches']} | {r['host_prep_and_upload_s']:.4f} | "
                     f"{r['device_s']:.6f} | {r['roofline_bytes'] / 1e6:.1f} | {fl} | {_pct(r['share_of_floor'])} | "
                     f"{_pct((r.get('shares') or {}).get('of_copy_floor'))} | {eager} | {speed} | {r.get('exact', '?')} |")
    lines += ["", "Per launch:", "", "| input | out | launch | MB | device µs | share of floor | share of torch copy | "
              "share of Triton copy | registers / spills on device |", "|---|---|---|---|---|---|---|---|---|"]
    for r in bm["rows"]:
        for launch in r["per_launch"]:
            dev, sh = launch.get("on_device") or {}, launch.get("shares") or {}
            lines.append(f"| {r['input']} | {r.get('out_dtype', 'fp32')} | {launch['kernel']} [{launch['specialization']}] | "
                         f"{launch['bytes'] / 1e6:.1f} | {launch['device_s'] * 1e6:.1f} | {_pct(launch['share_of_floor'])} | "
                         f"{_pct(sh.get('of_torch_copy'))} | {_pct(sh.get('of_triton_copy'))} | "
                         f"{dev.get('registers', '?')} / {dev.get('spills', '?')} |")
    if "targets" in bm:
        lines += ["", "Targets (issue 44):", "", *target_lines(bm["targets"])]
    return lines


def write(results: dict, outdir: Path) -> None:
    """device_check.json and device_check.md, written together (never half-written)."""
    outdir.mkdir(parents=True, exist_ok=True)
    lines = ["# GPU device check", "", "## Versions", ""]
    for k, v in results.get("versions", {}).items():
        lines.append(f"- {k}: {v}")
    ex = results.get("exactness")
    if ex:
        lines += ["", "## Bit-exactness vs reference", "",
                  f"- images: {ex['images']}, bit-identical: {ex['bit_identical']}, batches identical: {ex['batches_identical']}",
                  f"- failures: {len(ex['failures'])}"]
        for f in ex["failures"][:30]:
            lines.append(f"  - {f['case']} [{f['config']}]: grid_equal={f['grid_equal']} differing={f['differing_values']} {f['error'] or ''}")
    lines += _benchmark_lines(results.get("benchmarks"))
    ts = results.get("tile_sweep")
    if ts:
        lines += ["", "## Tile sweep (short form)", "", "| tiles | " + " | ".join(ts["inputs"]) + " | exact |",
                  "|---|" + "---|" * len(ts["inputs"]) + "---|"]
        for c in ts["candidates"]:
            lines.append(f"| {c['label']} | " + " | ".join(f"{c['device_s'][k] * 1e6:.1f} µs" for k in ts["inputs"])
                         + f" | {c['exact']} |")
    lines += workflow_lines(results.get("workflows"))
    b = results.get("build")
    if b:
        lines += ["", f"## Ahead-of-time build for {b['arch']}", ""]
        if b.get("skipped"):
            lines.append(f"- skipped: {b['skipped']}")
        else:
            lines += [f"- specializations: {b['specializations']}, registers: {b['registers']}, "
                      f"lowest theoretical occupancy: {b['lowest_occupancy']}",
                      f"- failures: {len(b['failures'])} (details in build/build.md)"]
    if results.get("error"):
        lines += ["", "## Error", "", "```", results["error"], "```"]
    atomic_write_many({outdir / "device_check.json": to_json(results),
                       outdir / "device_check.md": "\n".join(lines) + "\n"})


def main(argv: list[str], extra_steps: tuple = ()) -> int:
    """The check into RESULTS_DIR (`argv`): exactness, the benchmarks, `extra_steps` (each
    `step(results)`: `device_main` adds the tile sweep's short form), the build."""
    if len(argv) != 1:
        print("usage: python -m kimi_oracle.workflows.device_main [--dry-run] RESULTS_DIR", file=sys.stderr)
        return 2
    outdir = Path(argv[0])
    results: dict = {"versions": versions()}
    if results["versions"]["missing"]:
        write(results, outdir)
        print("missing: " + "; ".join(results["versions"]["missing"]), file=sys.stderr)
        return 3
    import traceback

    # The required steps first (exactness, the benchmarks, the build), then the optional ones
    # (`extra_steps`: the tile sweep's short form, the workflows), each run whatever the others did.
    failed = False
    for step in (exactness, benchmarks, lambda res: aot_build(res, outdir), *extra_steps):
        try:
            step(results)
        except Exception:  # noqa: BLE001 - keep what was measured so far, and go on
            results.setdefault("errors", []).append(traceback.format_exc())
            results["error"] = results["errors"][0]
            print(results["errors"][-1], file=sys.stderr)
            failed = True
        write(results, outdir)
    return 0 if not failed and passed(results) else 1


def exact_everywhere(ex: dict) -> bool:
    """Every image and every mixed batch of an `exactness` result identical to the reference."""
    return ex["bit_identical"] == ex["images"] and ex.get("batches_ok") == ex.get("batches")


def passed(results: dict) -> bool:
    """The check's verdict: every image and batch exact, every benchmark's timed output exact,
    the build without failures."""
    rows = results.get("benchmarks", {}).get("rows", [])
    sweep = results.get("tile_sweep", {}).get("candidates", [])
    return ("exactness" in results and exact_everywhere(results["exactness"]) and all(r.get("exact") is True for r in rows)
            and all(c["exact"] for c in sweep) and "build" in results and not results["build"].get("failures"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
