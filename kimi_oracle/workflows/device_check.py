"""On a CUDA machine: bit-exactness of the GPU pipeline against the reference, and benchmarks.

Run through `scripts/device_check.sh RESULTS_DIR` (which checks versions first). Writes
`RESULTS_DIR/device_check.json` and `RESULTS_DIR/device_check.md`. Installs nothing.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import statistics
import sys
import time
from pathlib import Path

# HBM peak bandwidth by device name fragment (vendor figures, bytes/s), for the % column.
HBM_PEAK = {"H200": 4.8e12, "H100 SXM": 3.35e12, "H100": 3.35e12, "A100": 2.0e12}


def versions() -> dict:
    """Versions of everything the check needs, and what is missing."""
    out: dict = {"python": platform.python_version(), "missing": []}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        if not torch.cuda.is_available():
            out["missing"].append("a CUDA device visible to torch (torch.cuda.is_available() is False)")
    except Exception as exc:  # noqa: BLE001 - report any import failure
        out["missing"].append(f"torch ({exc})")
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001
        out["missing"].append(f"triton ({exc})")
    try:
        import PIL

        out["pillow"] = PIL.__version__
        if not PIL.__version__.startswith("13.0"):
            out["missing"].append(f"Pillow 13.0.x (found {PIL.__version__}; bring a pillow==13.0.* wheel for Python {out['python']})")
    except Exception as exc:  # noqa: BLE001
        out["missing"].append(f"Pillow 13.0.x ({exc})")
    try:
        import numpy

        out["numpy"] = numpy.__version__
    except Exception as exc:  # noqa: BLE001
        out["missing"].append(f"numpy ({exc})")
    return out


def _cases():
    """>= 200 generated images: real-world sizes at K3 limits, RGBA, every mode, small limits."""
    import numpy as np

    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.inputs.generators import CaseParams, MODES, alpha_patterns_for, make_image

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


def exactness(results: dict) -> None:
    """GPU pipeline vs reference, one image at a time and in batches, torch.equal."""
    import torch

    from kimi_oracle.pipelines import reference
    from kimi_oracle.pipelines.gpu import preprocess

    cases = _cases()
    rows = []
    t0 = time.time()
    for cfg, params, img in cases:
        exp = reference.preprocess([img], cfg)
        try:
            got = preprocess([img], cfg, device="cuda")
            gv = got.pixel_values.cpu()
            same_grid = torch.equal(got.grid_thws, exp.grid_thws)
            differing = int((gv != exp.pixel_values).sum()) if gv.shape == exp.pixel_values.shape else -1
            err = None
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
        got = preprocess(imgs, cfg, device="cuda", chunk_bytes=1 << 20)
        batch_ok += int(torch.equal(got.pixel_values.cpu(), exp.pixel_values) and torch.equal(got.grid_thws, exp.grid_thws))
    results["exactness"] = {
        "images": len(rows),
        "bit_identical": sum(1 for r in rows if r["grid_equal"] and r["differing_values"] == 0),
        "failures": [r for r in rows if not (r["grid_equal"] and r["differing_values"] == 0)],
        "batches_identical": f"{batch_ok}/{batch_total}",
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


def benchmarks(results: dict) -> None:
    """Device time from uint8 planes on the device to the finished output, vs the eager path."""
    import torch

    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.inputs.generators import CaseParams, make_image
    from kimi_oracle.pipelines import eager
    from kimi_oracle.pipelines.gpu.pipeline import prepare_launches

    k3 = PreprocessConfig.k3()
    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in HBM_PEAK.items() if k in name), None)
    inputs = {
        "16 x 1920x1080 RGB (K3, no resampling)": [make_image(CaseParams(1920, 1080, "RGB", seed=i)) for i in range(16)],
        "1 x 7680x4320 RGB (K3, resampled)": [make_image(CaseParams(7680, 4320, "RGB", seed=1))],
        "1 x 7680x4320 RGBA (K3, resampled, premultiplied)": [make_image(CaseParams(7680, 4320, "RGBA", "random", seed=2))],
        "1 x 4032x3024 RGB (K3, no resampling)": [make_image(CaseParams(4032, 3024, "RGB", seed=3))],
        "4 x 4032x3024 RGB (K3 with in_patch_limit 16384, resampled)": [make_image(CaseParams(4032, 3024, "RGB", seed=4 + i)) for i in range(4)],
    }
    rows = []
    for label, imgs in inputs.items():
        cfg = dataclasses.replace(k3, in_patch_limit=16384) if "16384" in label else k3
        t = time.perf_counter()
        launches, stats, _finish = prepare_launches(imgs, cfg, device="cuda")
        torch.cuda.synchronize()
        host_and_h2d = time.perf_counter() - t

        def run():
            for fn in launches:
                fn()

        dev_s = _time_cuda(run)
        useful = stats["source_bytes"] + stats["output_bytes"]
        tens, plans, alphas = eager.host_tensors(imgs, cfg)
        tens = [x.cuda() for x in tens]
        eager_s = _time_cuda(lambda: eager.from_tensors(tens, plans, alphas, cfg), iters=10)
        rows.append({
            "input": label,
            "launches": stats["launches"],
            "host_prep_and_upload_s": round(host_and_h2d, 4),
            "device_s": dev_s,
            "source_bytes": stats["source_bytes"],
            "output_bytes": stats["output_bytes"],
            "effective_GBps": useful / dev_s / 1e9,
            "pct_of_hbm_peak": (100.0 * useful / dev_s / peak) if peak else None,
            "eager_device_s": eager_s,
            "speedup_vs_eager": eager_s / dev_s,
        })
    results["benchmarks"] = {"device": name, "hbm_peak_Bps": peak, "rows": rows}


def write(results: dict, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "device_check.json").write_text(json.dumps(results, indent=2, default=str))
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
    bm = results.get("benchmarks")
    if bm:
        lines += ["", f"## Benchmarks on {bm['device']}", "",
                  "| input | launches | host+H2D s | device s | GB/s | % HBM peak | eager s | speedup |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in bm["rows"]:
            pct = "n/a" if r["pct_of_hbm_peak"] is None else f"{r['pct_of_hbm_peak']:.1f}"
            lines.append(f"| {r['input']} | {r['launches']} | {r['host_prep_and_upload_s']:.4f} | {r['device_s']:.6f} | "
                         f"{r['effective_GBps']:.0f} | {pct} | {r['eager_device_s']:.6f} | {r['speedup_vs_eager']:.1f}x |")
    if results.get("error"):
        lines += ["", "## Error", "", "```", results["error"], "```"]
    (outdir / "device_check.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m kimi_oracle.workflows.device_check RESULTS_DIR", file=sys.stderr)
        return 2
    outdir = Path(argv[0])
    results: dict = {"versions": versions()}
    if results["versions"]["missing"]:
        write(results, outdir)
        print("missing: " + "; ".join(results["versions"]["missing"]), file=sys.stderr)
        return 3
    import traceback

    for step in (exactness, benchmarks):
        try:
            step(results)
        except Exception:  # noqa: BLE001 - keep what was measured so far
            results["error"] = traceback.format_exc()
            write(results, outdir)
            print(results["error"], file=sys.stderr)
            return 1
        write(results, outdir)
    ex = results["exactness"]
    return 0 if ex["bit_identical"] == ex["images"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
