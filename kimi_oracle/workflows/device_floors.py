"""The floor a launch is read against, measured on the device itself (issue 44), and the targets.

A launch's roofline bytes (`workflows.bench.roofline`: its sources read once, its output written
once) are read against three floors:

- the **nominal peak** of the device, by its name (`bench.PEAK_BANDWIDTH`: H200 4.8 TB/s, H100
  SXM 3.35 TB/s, H100 PCIe 2.0 TB/s, A100 SXM 2.039 TB/s, ...), with the table entry it matched;
- what the device **sustains for a copy** of the same byte count, measured in the same run: a
  `torch` device-to-device copy (`dst.copy_(src)`, half the bytes read, half written) and a
  trivial Triton copy kernel (`copy_kernel`, contiguous blocks), the faster of the two being
  the measured floor.

Targets (`targets`), printed met / not met by the device check: every no-resample tail launch
(`tail_kernel`, `FETCH=direct`) at >= 70 % of the measured copy floor, every resampled input
(all its launches) at >= 50 %, for float32 and bfloat16 output alike.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import triton
import triton.language as tl

from kimi_oracle.workflows.bench import peak_entry

TAIL_TARGET = 0.70
RESAMPLED_TARGET = 0.50
COPY_BLOCK = 4096  # bytes a program of the copy kernel moves (contiguous: 128-bit accesses)


def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    """dst[i] = src[i] for i < n: one contiguous block a program."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


_KERNEL: list[Any] = []


def copy_kernel() -> Any:
    """The Triton copy kernel, made on first use (so that TRITON_INTERPRET, set or not by then,
    decides how it runs, as for the pipeline's own kernels: `pipelines.gpu.backend`)."""
    if not _KERNEL:
        _KERNEL.append(triton.jit(_copy))
    return _KERNEL[0]


def triton_copy(src: Any, dst: Any, block: int = COPY_BLOCK) -> None:
    """The copy kernel over two equal 1-D uint8 tensors."""
    n = src.numel()
    copy_kernel()[(triton.cdiv(n, block),)](src, dst, n, BLOCK=block)


def nominal_peak(device_name: str) -> tuple[str | None, float | None]:
    """(the `PEAK_BANDWIDTH` entry the device's name matched, its bytes/s); (None, None) unknown."""
    return peak_entry(device_name)


def copy_floors(nbytes: int, timer: Callable[[Callable[[], None]], float], device: str = "cuda") -> dict[str, Any]:
    """Seconds the device takes to read nbytes/2 and write nbytes/2 (a launch moving `nbytes`):
    by `torch` and by `copy_kernel`, each timed by `timer(fn)` (CUDA events, median); `floor_s`
    is the faster."""
    import torch

    half = max(1, nbytes // 2)
    src = torch.randint(0, 256, (half,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    torch_s = timer(lambda: dst.copy_(src))
    dst.zero_()  # (so that what the Triton kernel copies is checked, not what torch left there)
    triton_s = timer(lambda: triton_copy(src, dst))
    if not torch.equal(src, dst):  # (a floor of wrong work is no floor)
        raise RuntimeError("the Triton copy kernel did not copy")
    return {"bytes": 2 * half, "torch_copy_s": torch_s, "triton_copy_s": triton_s, "floor_s": min(torch_s, triton_s)}


def shares(nbytes: int, seconds: float, peak: float | None, floor: dict[str, Any]) -> dict[str, float | None]:
    """A launch's (or input's) time as a share of each floor: the nominal peak's and the two
    measured copies' (1.0: as fast as the floor)."""
    if seconds <= 0:
        return {"of_peak": None, "of_torch_copy": None, "of_triton_copy": None, "of_copy_floor": None}
    return {"of_peak": (nbytes / peak / seconds) if peak else None,
            "of_torch_copy": floor["torch_copy_s"] / seconds, "of_triton_copy": floor["triton_copy_s"] / seconds,
            "of_copy_floor": floor["floor_s"] / seconds}


def is_tail_without_resampling(launch: dict[str, Any]) -> bool:
    """The no-resample tail: `tail_kernel` reading its source directly (`FETCH=direct`)."""
    return launch.get("kernel") == "tail_kernel" and "FETCH=direct" in str(launch.get("specialization", ""))


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The targets per benchmark row (each with `input`, `out_dtype`, `resampled`, `shares` of
    the whole input and `per_launch` with their `shares`): met / not met, and by how much."""
    out = []
    for row in rows:
        label = f"{row['input']} [{row.get('out_dtype', 'fp32')}]"
        exact = row.get("exact", True) is True  # (a fast launch of wrong work meets nothing)
        if row.get("resampled"):
            share = (row.get("shares") or {}).get("of_copy_floor")
            out.append({"target": f"resampled input >= {RESAMPLED_TARGET:.0%} of the copy floor", "input": label,
                        "launch": "all", "share": share,
                        "met": exact and share is not None and share >= RESAMPLED_TARGET})
        for launch in row.get("per_launch") or []:
            if is_tail_without_resampling(launch) and not row.get("resampled"):
                share = (launch.get("shares") or {}).get("of_copy_floor")
                out.append({"target": f"no-resample tail >= {TAIL_TARGET:.0%} of the copy floor", "input": label,
                            "launch": f"{launch['kernel']} [{launch['specialization']}]", "share": share,
                            "met": exact and share is not None and share >= TAIL_TARGET})
    return out


def target_lines(found: Sequence[dict[str, Any]]) -> list[str]:
    """The targets as Markdown lines (`met` / `NOT MET`, the share)."""
    if not found:
        return ["- no target applies (no no-resample tail launch and no resampled input was benchmarked)"]
    lines = []
    for t in found:
        share = "n/a" if t["share"] is None else f"{100 * t['share']:.1f} %"
        lines.append(f"- {'met' if t['met'] else 'NOT MET'}: {t['target']}: {t['input']}, {t['launch']}: {share}")
    return lines


__all__ = ["COPY_BLOCK", "RESAMPLED_TARGET", "TAIL_TARGET", "copy_floors", "copy_kernel", "is_tail_without_resampling",
           "nominal_peak", "shares", "target_lines", "targets", "triton_copy"]
