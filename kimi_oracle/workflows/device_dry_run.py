"""`scripts/device_check.sh --dry-run RESULTS_DIR` (`workflows.device_main`): everything the device check does but the CUDA
launches, on this machine, so that the device minutes are spent once (issue 44).

It checks the versions (a CUDA device is not required here; everything else the check needs is),
makes the 220 exactness images, plans every benchmark input's launches for float32 and bfloat16
output (`pipeline.launch_plan`: the roofline bytes, which targets apply, the byte counts the
copy floors will be measured for), plans the tile sweep's short form, and runs the ahead-of-time
build for sm_90 (`kimi-oracle gpu build`: the real compiler, no GPU). Writes `dry_run.json` and
`dry_run.md`; exit 0 when all of that worked, 1 when a step failed (its error recorded), 3 when
something the device run needs is missing.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from kimi_oracle.core.files import atomic_write_many, to_json

DRY_RUN_ARCH = "sm_90"


def _plan(results: dict[str, Any]) -> None:
    import torch

    from kimi_oracle.workflows.bench import roofline
    from kimi_oracle.workflows.device_check import OUT_DTYPES, _cases, benchmark_cases, resampled
    from kimi_oracle.workflows.device_floors import is_tail_without_resampling

    results["exactness_images"] = len(_cases())
    rows, sizes = [], set()
    for label, (imgs, cfg) in benchmark_cases().items():
        for dtype in OUT_DTYPES:
            roof = roofline(imgs, cfg, torch.bfloat16 if dtype == "bf16" else torch.float32)
            sizes.update([roof["bytes"], *(r["bytes"] for r in roof["launches"])])
            rows.append({"input": label, "out_dtype": dtype, "launches": len(roof["launches"]),
                         "roofline_bytes": roof["bytes"], "resampled": resampled(roof),
                         "tail_targets": sum(is_tail_without_resampling(r) for r in roof["launches"])})
    results["benchmarks"] = rows
    results["copy_floor_sizes"] = sorted(sizes)


def _sweep(results: dict[str, Any]) -> None:
    from kimi_oracle.pipelines.gpu.pipeline import launch_plan
    from kimi_oracle.workflows import tile_sweep
    from kimi_oracle.workflows.device_check import benchmark_cases

    inputs = list(benchmark_cases().items())[:tile_sweep.SHORT_SWEEP_INPUTS]
    results["tile_sweep"] = [{"tiles": tile_sweep._label(tiles),
                              "launches": sum(len(launch_plan(imgs, cfg, tiles=tiles)[0]) for _, (imgs, cfg) in inputs)}
                             for tiles in tile_sweep.candidates()[:tile_sweep.SHORT_SWEEP_CANDIDATES]]


# What the workflows import beyond the device check's own needs (each found, or the dry run fails).
WORKFLOW_PACKAGES = ("click", "rich", "hypothesis", "pytest", "pytest_benchmark", "atheris")


def _workflows(results: dict[str, Any], outdir: Path) -> None:
    import importlib.util

    from kimi_oracle.workflows.device_workflows import parse_errors, sglang_tree, workflows

    tree = sglang_tree()
    found = workflows(outdir / "workflows", tree)
    missing = [p for p in WORKFLOW_PACKAGES if importlib.util.find_spec(p) is None]
    refused = parse_errors(found)
    results["workflows"] = {"sglang_tree": str(tree) if tree else None, "missing_packages": missing,
                            "refused": refused, "commands": ["kimi-oracle " + " ".join(w.args) for w in found]}
    if missing or refused:
        raise RuntimeError(f"the workflows cannot run: missing {missing}, refused by the CLI {refused}")


def _build(results: dict[str, Any], outdir: Path) -> None:
    from kimi_oracle.pipelines.gpu import build

    records, bad = build.build([DRY_RUN_ARCH], outdir / "build")
    results["build"] = {"arch": DRY_RUN_ARCH, "specializations": len(records), "failures": bad}


def _markdown(results: dict[str, Any]) -> str:
    lines = ["# Device check, dry run (no CUDA launch)", "",
             f"- missing for the device run: {', '.join(results['missing']) or 'nothing'}",
             f"- exactness images: {results.get('exactness_images', '?')}",
             f"- copy floors to measure: {len(results.get('copy_floor_sizes', []))} byte counts"]
    if results.get("benchmarks"):
        lines += ["", "| input | out | launches | roofline MB | resampled | tail targets |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['input']} | {r['out_dtype']} | {r['launches']} | {r['roofline_bytes'] / 1e6:.1f} | "
                  f"{r['resampled']} | {r['tail_targets']} |" for r in results["benchmarks"]]
    for t in results.get("tile_sweep") or []:
        lines.append(f"- tile sweep (short): {t['tiles']}: {t['launches']} launches")
    flows = results.get("workflows") or {}
    if flows:
        lines.append(f"- workflows on CUDA ({len(flows['commands'])}; SGLang tree: "
                     f"{flows['sglang_tree'] or 'NONE: prune one into device-carry/sglang-tree'}):")
        lines += [f"  - `{c}`" for c in flows["commands"]]
    if results.get("build"):
        b = results["build"]
        lines.append(f"- build {b['arch']}: {b['specializations']} specializations, {len(b['failures'])} failures")
    for step, error in results.get("errors", {}).items():
        lines += ["", f"## {step} failed", "", "```", error, "```"]
    lines.append(f"\nverdict: {'ready' if results['ok'] else 'NOT ready'} ({results['seconds']:.0f} s)")
    return "\n".join(lines) + "\n"


def dry_run(outdir: Path) -> int:
    """The dry run; its exit code (see the module's doc)."""
    from kimi_oracle.workflows.device_check import versions

    began = time.time()
    v = versions()
    missing = [m for m in v["missing"] if not m.startswith("a CUDA device")]
    results: dict[str, Any] = {"versions": v, "missing": missing, "errors": {}}
    if not missing:
        for name, step in (("plan", _plan), ("tile sweep", _sweep), ("workflows", lambda r: _workflows(r, outdir)),
                           ("build", lambda r: _build(r, outdir))):
            try:
                step(results)
            except Exception:  # noqa: BLE001 - recorded, the other steps still run
                results["errors"][name] = traceback.format_exc()
    failures = (results.get("build") or {}).get("failures") or []
    results["ok"] = not missing and not results["errors"] and not failures
    results["seconds"] = time.time() - began
    outdir.mkdir(parents=True, exist_ok=True)
    atomic_write_many({outdir / "dry_run.json": to_json(results), outdir / "dry_run.md": _markdown(results)})
    print(_markdown(results), end="")
    return 3 if missing else (0 if results["ok"] else 1)


__all__ = ["DRY_RUN_ARCH", "dry_run"]
