"""Benchmark inputs, timers and comparisons shared by the benchmark suite, `bench` and `gate`."""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError, KimiOracleError
from kimi_oracle.core.files import load_json
from kimi_oracle.inputs.generators import CaseParams, make_image


@dataclass(frozen=True)
class BenchInput:
    """One representative benchmark input: a few images and the profile they run under."""

    name: str
    profile: str
    params: tuple[CaseParams, ...]
    resampled: bool
    description: str

    def images(self) -> list[Image.Image]:
        """The input images (built once per process and cached)."""
        return list(_build(self.params))

    def config(self) -> PreprocessConfig:
        """The profile's configuration."""
        return PreprocessConfig.profile(self.profile)

    @property
    def megapixels(self) -> float:
        """Source megapixels of the whole input."""
        return sum(p.width * p.height for p in self.params) / 1e6


@functools.lru_cache(maxsize=16)
def _build(params: tuple[CaseParams, ...]) -> tuple[Image.Image, ...]:
    return tuple(make_image(p) for p in params)


def _mixed_batch() -> tuple[CaseParams, ...]:
    sizes = [(640, 480), (1280, 720), (1920, 1080), (1024, 768), (800, 600), (480, 640), (1080, 1920), (512, 512)]
    modes = [("RGB", "opaque"), ("RGBA", "checker"), ("L", "opaque"), ("P", "opaque"),
             ("RGBA", "gradient"), ("RGB", "opaque"), ("LA", "random"), ("RGB", "opaque")]
    out = []
    for i in range(16):
        w, h = sizes[i % len(sizes)]
        mode, alpha = modes[(i * 3) % len(modes)]
        out.append(CaseParams(w, h, mode, alpha, "gradient" if i % 2 else "noise", seed=100 + i))
    return tuple(out)


BENCH_INPUTS: dict[str, BenchInput] = {
    b.name: b
    for b in (
        BenchInput("rgb-640x480", "k3", (CaseParams(640, 480, "RGB", content="noise", seed=1),), False,
                   "640x480 RGB, K3 (no resampling)"),
        BenchInput("rgb-1920x1080", "k3", (CaseParams(1920, 1080, "RGB", content="noise", seed=2),), False,
                   "1920x1080 RGB, K3 (no resampling)"),
        BenchInput("rgba-1920x1080-chessboard", "k3",
                   (CaseParams(1920, 1080, "RGBA", "gradient", "noise", seed=3),), False,
                   "1920x1080 RGBA composited on the K3 chessboard"),
        BenchInput("rgb-4032x3024", "k3", (CaseParams(4032, 3024, "RGB", content="noise", seed=4),), False,
                   "4032x3024 RGB, K3 (12.2 Mpx: within the K3 budget, no resampling)"),
        BenchInput("rgb-4032x3024-k25", "k25", (CaseParams(4032, 3024, "RGB", content="noise", seed=4),), True,
                   "4032x3024 RGB, K2.5 (resampled to 2069x1551)"),
        BenchInput("rgb-7680x4320", "k3", (CaseParams(7680, 4320, "RGB", content="noise", seed=5),), True,
                   "7680x4320 RGB, K3 (resampled)"),
        BenchInput("batch16-mixed", "k3", _mixed_batch(), False,
                   "16 mixed images (RGB, RGBA, L, P, LA; 480x640 to 1920x1080), K3"),
    )
}
# The inputs of the quick mode, which keeps a CPU run of the suite under 2 minutes.
QUICK_INPUTS = ("rgb-640x480", "rgba-1920x1080-chessboard", "rgb-4032x3024-k25", "batch16-mixed")


def select_inputs(quick: bool) -> list[BenchInput]:
    """The benchmark inputs of a full or quick run."""
    names = QUICK_INPUTS if quick else tuple(BENCH_INPUTS)
    return [BENCH_INPUTS[n] for n in names]


def output_bytes(result: Any) -> int:
    """Bytes of a result's pixel_values and grid_thws."""
    pv = getattr(result, "pixel_values", None)
    if pv is None:
        pv = result[0]
    return int(pv.numel() * pv.element_size())


def source_bytes(images: Sequence[Image.Image]) -> int:
    """Unique bytes of the decoded source planes (what a kernel must read at least once)."""
    total = 0
    for img in images:
        bands = len(img.getbands())
        bits = {"1": 1, "I;16": 16, "I;16B": 16, "I;16L": 16, "I": 32, "F": 32}.get(img.mode, 8 * bands)
        total += (img.width * img.height * bits + 7) // 8
    return total


def interleaved_ratio(
    new: Callable[[], Any], old: Callable[[], Any], *, rounds: int = 7, warmup: int = 1,
    timer: Callable[[], float] = time.perf_counter, min_rounds: int | None = None,
    decided: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """A/B timing: alternate NEW and OLD, return the median of per-pair ratios and its spread.
    With `decided`, the rounds end early, after `min_rounds`, at the first round whose figures
    so far it accepts (the gate: the ratio is clear of its threshold by more than the noise, or
    there is no time for another pair): a ratio always rests on `min_rounds` pairs at least."""
    for _ in range(warmup):
        new()
        old()
    ratios: list[float] = []
    new_times: list[float] = []
    old_times: list[float] = []
    for i in range(rounds):
        pair = []
        # Alternate which one goes first, so a drift of the machine does not favour one side.
        order = ((new, new_times), (old, old_times)) if i % 2 == 0 else ((old, old_times), (new, new_times))
        for fn, sink in order:
            t0 = timer()
            fn()
            dt = timer() - t0
            sink.append(dt)
            pair.append((fn is new, dt))
        t_new = next(dt for is_new, dt in pair if is_new)
        t_old = next(dt for is_new, dt in pair if not is_new)
        ratios.append(t_new / t_old if t_old > 0 else float("inf"))
        if decided is not None and i + 1 >= (min_rounds or rounds) and i + 1 < rounds:
            if decided(_ratio_stats(ratios, new_times, old_times)):
                break
    return _ratio_stats(ratios, new_times, old_times)


def _ratio_stats(ratios: list[float], new_times: list[float], old_times: list[float]) -> dict[str, Any]:
    """The median ratio of the rounds so far, its noise (half the interquartile range: robust to
    one stray sample), each side's median time and the rounds."""
    ordered = sorted(ratios)
    q1 = ordered[len(ordered) // 4]
    q3 = ordered[(3 * len(ordered)) // 4]
    return {
        "ratio": statistics.median(ordered),
        "noise": (q3 - q1) / 2,
        "ratios": ordered,
        "new_median_s": statistics.median(new_times),
        "old_median_s": statistics.median(old_times),
        "rounds": len(ordered),
    }


def load_benchmark_json(path: Path) -> dict[str, float]:
    """Median seconds per benchmark name from a pytest-benchmark JSON file."""
    try:
        doc = load_json(path)  # (core.files: the one reader of user files)
        return {b["name"]: float(b["stats"]["median"]) for b in doc["benchmarks"]}
    except (InputError, ValueError, KeyError, TypeError) as exc:
        raise KimiOracleError(f"cannot read benchmark results {path}: {exc}") from None


def compare_medians(
    current: dict[str, float], baseline: dict[str, float], fail_above_pct: float | None
) -> tuple[list[dict[str, Any]], bool]:
    """Rows (name, baseline, current, change %) and whether any change exceeds the threshold."""
    rows = []
    failed = False
    for name in sorted(set(current) | set(baseline)):
        cur = current.get(name)
        base = baseline.get(name)
        change = None if cur is None or base is None or base == 0 else (cur / base - 1.0) * 100.0
        bad = fail_above_pct is not None and change is not None and change > fail_above_pct
        failed |= bad
        rows.append({"name": name, "baseline_s": base, "current_s": cur, "change_pct": change, "failed": bad})
    return rows, failed


# Peak HBM bandwidth (bytes/s) by a fragment of torch's device name, from the vendors' data
# sheets; the most specific fragment first. The one table of it: `device_check` imports it.
PEAK_BANDWIDTH: tuple[tuple[str, float], ...] = (
    ("H200", 4.8e12),
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),  # SXM5 80GB HBM3 ("NVIDIA H100 80GB HBM3")
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIe", 1.935e12),
    ("A100", 1.555e12),  # the 40GB SXM4 and PCIe cards
    ("L40S", 0.864e12),
)
# The floors every benchmark input is read against, with or without a GPU at hand.
ROOFLINE_DEVICES: tuple[tuple[str, float], ...] = (("H200", 4.8e12), ("A100-SXM4-80GB", 2.039e12))


def peak_entry(device_name: str) -> tuple[str | None, float | None]:
    """(the `PEAK_BANDWIDTH` entry a device's torch name matches, its peak HBM bytes/s);
    (None, None) when the table does not know it."""
    for fragment, value in PEAK_BANDWIDTH:
        if fragment in device_name:
            return fragment, value
    return None, None


def peak_bandwidth(device_name: str) -> float | None:
    """Peak HBM bytes/s of a device, by its torch name; None when the table does not know it."""
    return peak_entry(device_name)[1]


def device_peak_bandwidth() -> tuple[str, float | None]:
    """(device name, peak bandwidth in bytes/s or None when unknown) of the current CUDA device."""
    import torch

    name = torch.cuda.get_device_name()
    return name, peak_bandwidth(name)


def roofline(images: Sequence[Image.Image], config: PreprocessConfig, out_dtype: Any = None) -> dict[str, Any]:
    """Bytes each GPU launch must move for this input (sources read once, outputs written
    once; small tables not counted) and the time floor of each at the ROOFLINE_DEVICES' peak
    bandwidth. Host planning only (`pipelines.gpu.pipeline.launch_plan`): needs no GPU."""
    import torch

    from kimi_oracle.pipelines.gpu.pipeline import launch_plan

    launches, _ = launch_plan(images, config, out_dtype=out_dtype or torch.float32)
    rows = []
    for launch in launches:
        moved = launch.read_bytes + launch.write_bytes
        rows.append({"kernel": launch.kernel_name, "specialization": launch.specialization,
                     "programs": launch.grid, "read_bytes": launch.read_bytes,
                     "write_bytes": launch.write_bytes, "bytes": moved,
                     "floor_s": {name: moved / peak for name, peak in ROOFLINE_DEVICES}})
    total = sum(r["bytes"] for r in rows)
    return {"launches": rows, "bytes": total,
            "floor_s": {name: total / peak for name, peak in ROOFLINE_DEVICES}}


def bandwidth_share(bytes_moved: int, seconds: float) -> dict[str, Any]:
    """Achieved bandwidth and its share of the device's peak, for `extra_info`."""
    name, peak = device_peak_bandwidth()
    achieved = bytes_moved / seconds if seconds > 0 else float("inf")
    return {
        "device": name,
        "achieved_bytes_per_s": achieved,
        "peak_bytes_per_s": peak,
        "bandwidth_share": (achieved / peak) if peak else None,
    }


def cuda_event_times(fn: Callable[[], Any], *, rounds: int = 5, warmup: int = 2,
                     flush_bytes: int = 256 << 20) -> dict[str, Any]:
    """Median / min seconds of `fn` by CUDA events, after warm-up, with L2 flushed before each run."""
    import torch

    flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        flush.zero_()  # evicts L2 so every run reads its inputs from HBM
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del flush
    return {"cuda_median_s": statistics.median(times), "cuda_min_s": min(times), "cuda_rounds": rounds}
