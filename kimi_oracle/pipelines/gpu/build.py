"""Ahead-of-time builds: every kernel specialization the pipeline launches, compiled for real
GPU architectures on a machine without a GPU.

`build(archs, out_dir)` plans the launches of a batch that covers every storage kind, both
fill stages, both pass orders, NEAREST, no resampling, float32 and bfloat16 output, at the
CUDA default tiles (`pipeline.launch_plan`, nothing runs), and compiles each distinct
specialization with `triton.compile` for `GPUTarget("cuda", 90 | 80, 32)`, with the
signature, constexprs, alignment attributes and options a CUDA launch would use. Registers
and spills come from the log of the `ptxas` run Triton itself makes (TRITON_DUMP_PTXAS_LOG);
the compile runs in a child process with `TRITON_INTERPRET` removed and a fresh Triton cache,
whatever the caller's environment, so every kernel is really compiled.

Writes `build.json` (a list of records: kernel, specialization, arch, registers,
spilled_bytes, shared_bytes, ptx_bytes, loads (the PTX's global loads: vector, scalar, widest
bits, by form; `load_census`), plus num_warps, threads, occupancy and error) and
`build.md` (the same as a table, with theoretical occupancy).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from kimi_oracle.core.errors import BackendError, InputError

# The architectures the build knows, as `--arch` spells them: compute capability.
ARCHS = {"sm_90": 90, "sm_80": 80}
# The target of issue 13: at most this many registers per thread at the default tiles.
MAX_REGISTERS = 64

# Per-SM limits for theoretical occupancy (CUDA C Programming Guide, compute capability
# table; the same for 8.0 and 9.0 except shared memory).
_SM = {
    80: {"registers": 65536, "threads": 2048, "warps": 64, "blocks": 32, "shared": 167936},
    90: {"registers": 65536, "threads": 2048, "warps": 64, "blocks": 32, "shared": 233472},
}
_REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256
_SHARED_RESERVED = 1024  # bytes the driver reserves per block


def parse_archs(text: str) -> list[str]:
    """`sm_90,sm_80` -> ["sm_90", "sm_80"], or InputError naming what is not known."""
    archs = [a.strip() for a in text.split(",") if a.strip()]
    if not archs:
        raise InputError("--arch needs at least one architecture (sm_90, sm_80)")
    unknown = [a for a in archs if a not in ARCHS]
    if unknown:
        raise InputError(f"unknown architecture {', '.join(unknown)} (known: {', '.join(ARCHS)})")
    return list(dict.fromkeys(archs))


def occupancy(arch: str, registers: int, num_warps: int, shared_bytes: int) -> dict[str, Any]:
    """Theoretical occupancy of a kernel: blocks per SM, the limiting resource, active warps
    as a fraction of the SM's maximum."""
    sm = _SM[ARCHS[arch]]
    per_warp = -(-max(registers, 1) * 32 // _REG_ALLOC_UNIT) * _REG_ALLOC_UNIT
    limits = {
        "registers": sm["registers"] // (per_warp * num_warps),
        "threads": sm["threads"] // (32 * num_warps),
        "blocks": sm["blocks"],
        "shared": sm["shared"] // (shared_bytes + _SHARED_RESERVED),
    }
    blocks = min(limits.values())
    limiter = min(limits, key=lambda k: limits[k])
    return {"blocks_per_sm": blocks, "limited_by": limiter,
            "occupancy": blocks * num_warps / sm["warps"]}


# --------------------------------------------------------------------------------------------
# What to build: the launches of a batch that covers every path
# --------------------------------------------------------------------------------------------


# Sizes under the build config (K3, in_patch_limit 4): both axes resized with the horizontal
# pass first (wide) and the vertical pass first (tall), one axis only (h, then v: a 1-pixel
# side stays 1), no resize.
BUILD_SIZES = ((64, 40), (24, 90), (90, 1), (1, 90), (14, 14))


# Every supported mode class (storage kind x conversion, with and without alpha or key).
BUILD_MODES = ("RGB", "RGBA", "RGBX", "LA", "PA", "L", "P", "1", "CMYK", "I;16", "I", "F", "YCbCr")


def _build_images() -> list:
    """Each of BUILD_MODES at each of BUILD_SIZES (random bytes; "L" and "I" with a
    transparency key too); "P" and "1" resize with NEAREST."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(13)
    images = []
    for w, h in BUILD_SIZES:
        first = len(images)
        for mode in BUILD_MODES:
            probe = Image.new(mode, (w, h))
            raw = rng.integers(0, 256, len(probe.tobytes()), dtype=np.uint8).tobytes()
            images.append(Image.frombytes(mode, (w, h), raw))
        for mode in ("L", "I"):
            keyed = images[first + BUILD_MODES.index(mode)].copy()
            keyed.info["transparency"] = 5
            images.append(keyed)
    return images


def _build_configs() -> list:
    """(config, out dtype) pairs: both fill stages x float32 / bfloat16 output."""
    import torch

    from kimi_oracle.core.config import PreprocessConfig

    base = PreprocessConfig.k3()
    out = []
    for stage in ("after_resize", "before_resize"):
        cfg = dataclasses.replace(base, in_patch_limit=4, transparent_bg_fill_stage=stage)
        for dtype in (torch.float32, torch.bfloat16):
            out.append((cfg, dtype))
    return out


def planned_launches() -> list:
    """One `pipeline.Launch` per distinct (kernel, specialization) of the build batch."""
    from kimi_oracle.pipelines.gpu.pipeline import CUDA_TILES, launch_plan

    images = _build_images()
    seen: dict[tuple[str, str], Any] = {}
    for cfg, dtype in _build_configs():
        # one launch plan per image: a specialization's grouping never changes its code
        for img in images:
            launches, _ = launch_plan([img], cfg, out_dtype=dtype, tiles=CUDA_TILES)
            for launch in launches:
                seen.setdefault((launch.kernel_name, launch.specialization), launch)
    return [seen[k] for k in sorted(seen)]


# --------------------------------------------------------------------------------------------
# Compiling one launch (in the child process)
# --------------------------------------------------------------------------------------------

_TYPES = {"torch.uint8": "u8", "torch.uint16": "u16", "torch.int16": "i16", "torch.int32": "i32",
          "torch.int64": "i64", "torch.float32": "fp32", "torch.float64": "fp64",
          "torch.bfloat16": "bf16", "torch.float16": "fp16"}


def _signature(launch) -> tuple[dict[str, str], dict[str, Any], dict[tuple, list]]:
    """Triton's signature, constexprs and pointer-alignment attributes of a launch, as its JIT
    would derive them on a CUDA device (16-byte aligned tensors get `tt.divisibility` 16)."""
    names = launch.kernel.arg_names
    signature: dict[str, str] = {}
    attrs: dict[tuple, list] = {}
    for i, (name, value) in enumerate(zip(names, launch.args)):
        signature[name] = "*" + _TYPES[str(value.dtype)]
        attrs[(i,)] = [["tt.divisibility", 16]] if value.data_ptr() % 16 == 0 else []
    for name in names[len(launch.args):]:
        signature[name] = "constexpr"
    return signature, dict(launch.constexprs), attrs


_PTXAS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
}


# A global load in PTX: `ld.global[.qualifiers][.v2|.v4].TYPE` (TYPE's bits: b8 .. b64, f32, ...).
_LOAD = re.compile(r"\bld\.global((?:\.[A-Za-z0-9_:]+?)*?)(?:\.(v2|v4|v8))?\.([busf])(8|16|32|64)\b")


def load_census(ptx: str) -> dict[str, Any]:
    """The kernel's global loads by form: how many are vector loads (`.v2` / `.v4`, or one
    128-bit access), how many scalar, and by width (`u8`, `b32`, `v4.b32`, ...), and the widest
    access in bits. Issue 44: the hot loads of the tail and the pass kernels are to be vector
    loads; a regression to scalar byte loads shows here."""
    forms: dict[str, int] = {}
    vector = scalar = widest = 0
    for _, vec, kind, bits in _LOAD.findall(ptx):
        lanes = {"v2": 2, "v4": 4, "v8": 8}.get(vec, 1)
        width = lanes * int(bits)
        name = (f"{vec}." if vec else "") + kind + bits
        forms[name] = forms.get(name, 0) + 1
        widest = max(widest, width)
        if lanes > 1 or width >= 128:
            vector += 1
        else:
            scalar += 1
    return {"vector": vector, "scalar": scalar, "widest_bits": widest, "forms": dict(sorted(forms.items()))}


def compile_launch(launch, arch: str) -> dict[str, Any]:
    """Compile one launch for `arch`; the build record (error set when it fails)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    record: dict[str, Any] = {
        "kernel": launch.kernel_name, "specialization": launch.specialization, "arch": arch,
        "registers": None, "spilled_bytes": None, "shared_bytes": None, "ptx_bytes": None,
        "num_warps": launch.options["num_warps"], "threads": 32 * launch.options["num_warps"],
        "error": None,
    }
    signature, constexprs, attrs = _signature(launch)
    log = io.StringIO()
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                                      target=GPUTarget("cuda", ARCHS[arch], 32),
                                      options=dict(launch.options))
    except Exception as exc:  # noqa: BLE001 - a compile error is a result of the build
        record["error"] = f"{type(exc).__name__}: {str(exc).strip()[-2000:]}"
        return record
    record["compile_s"] = round(time.perf_counter() - start, 3)
    text = log.getvalue()
    found = {k: p.search(text) for k, p in _PTXAS.items()}
    if found["registers"] is None or found["spill_stores"] is None:
        record["error"] = "ptxas reported no register or spill figures (TRITON_DUMP_PTXAS_LOG unset?)"
        return record
    record["registers"] = int(found["registers"].group(1))
    record["spilled_bytes"] = int(found["spill_stores"].group(1))
    record["spill_load_bytes"] = int(found["spill_loads"].group(1)) if found["spill_loads"] else None
    record["shared_bytes"] = int(compiled.metadata.shared)
    ptx = compiled.asm["ptx"]
    record["ptx_bytes"] = len(ptx.encode())
    record["ptx_target"] = (re.search(r"^\.target\s+(\S+)", ptx, re.M) or [None, None])[1]
    record["loads"] = load_census(ptx)
    record.update(occupancy(arch, record["registers"], record["num_warps"], record["shared_bytes"]))
    return record


def failures(records: Sequence[dict[str, Any]]) -> list[str]:
    """What makes a build fail: compile errors, spills, more than MAX_REGISTERS registers."""
    out = []
    for r in records:
        name = f"{r['arch']} {r['kernel']} [{r['specialization']}]"
        if r.get("error"):
            out.append(f"{name}: {r['error'].splitlines()[0]}")
        elif r["spilled_bytes"]:
            out.append(f"{name}: spills {r['spilled_bytes']} bytes")
        elif r["registers"] > MAX_REGISTERS:
            out.append(f"{name}: {r['registers']} registers per thread (> {MAX_REGISTERS})")
    return out


def _fields(specialization: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in specialization.split())


def covering(launches: Sequence) -> list:
    """A sample of `launches` that, per kernel, holds every (code path, field value) pair:
    the path is FETCH (tail) or AXIS (pass) or CONV (fill), the fields are the rest (DT, NCH,
    CONV, OUT, PREMULTIPLY). Greedy: the launch that adds the most pairs not yet held, first
    in plan order on a tie. `gpu build --sample` compiles only these (the default suite's build)."""
    def pairs(launch) -> set[tuple[str, str, str, str]]:
        f = _fields(launch.specialization)
        path = f.get("FETCH") or f.get("AXIS") or f.get("CONV", "")
        return {(launch.kernel_name, path, k, v) for k, v in f.items()}

    held = [pairs(launch) for launch in launches]
    todo = set().union(*held)
    chosen: set[int] = set()
    while todo:
        best = max(range(len(held)), key=lambda i: len(held[i] & todo))
        chosen.add(best)
        todo -= held[best]
    return [launches[i] for i in sorted(chosen)]


def _worker(archs: list[str], result_path: Path, sample: bool = False) -> None:
    """Child process: plan, compile every specialization (or the `covering` sample) for every
    arch, write the records."""
    if os.environ.get("TRITON_INTERPRET"):
        raise BackendError("the build must run with TRITON_INTERPRET unset")
    launches = planned_launches()
    if sample:
        launches = covering(launches)
    records = [compile_launch(launch, arch) for arch in archs for launch in launches]
    from kimi_oracle.core.files import write_json

    write_json(result_path, records)


# --------------------------------------------------------------------------------------------
# The build as a command
# --------------------------------------------------------------------------------------------


def run_build(archs: Sequence[str], *, timeout: float | None = None, sample: bool = False) -> list[dict[str, Any]]:
    """Compile in a child process (TRITON_INTERPRET removed, fresh Triton cache, ptxas log on);
    its records. BackendError when the child fails."""
    with tempfile.TemporaryDirectory(prefix="kimi-gpu-build-") as tmp:
        result = Path(tmp) / "records.json"
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["TRITON_CACHE_DIR"] = str(Path(tmp) / "triton-cache")
        env["TRITON_DUMP_PTXAS_LOG"] = "1"
        code = ("import sys; from pathlib import Path; from kimi_oracle.pipelines.gpu import build; "
                "build._worker(sys.argv[1].split(','), Path(sys.argv[2]), sys.argv[3] == '1')")
        proc = subprocess.run([sys.executable, "-c", code, ",".join(archs), str(result), "1" if sample else "0"], env=env,
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not result.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-20:]
            raise BackendError("the ahead-of-time build failed before compiling everything "
                               f"(exit {proc.returncode}):\n" + "\n".join(tail))
        return json.loads(result.read_text())


def render_markdown(records: Sequence[dict[str, Any]]) -> str:
    """build.md: one table per architecture, registers and theoretical occupancy per kernel."""
    import triton

    lines = ["# Ahead-of-time build of the GPU pipeline's kernels", "",
             f"Triton {triton.__version__}; every specialization the pipeline launches for a batch "
             "covering every storage kind, both fill stages, both pass orders, NEAREST, no "
             "resampling, float32 and bfloat16 output, at the default CUDA tiles. Registers and "
             "spills from ptxas; theoretical occupancy = resident warps / 64 per SM. "
             f"Target: no spill, at most {MAX_REGISTERS} registers per thread.", ""]
    for arch in dict.fromkeys(r["arch"] for r in records):
        rows = [r for r in records if r["arch"] == arch]
        lines += [f"## {arch}", "",
                  "| kernel | specialization | registers | spilled bytes | shared bytes | warps | "
                  "blocks/SM | occupancy | PTX bytes | global loads vector / scalar (widest) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if r.get("error"):
                lines.append(f"| {r['kernel']} | {r['specialization']} | compile error: "
                             f"{r['error'].splitlines()[0][:120]} | | | | | | | |")
                continue
            loads = r.get("loads") or {}
            lines.append(f"| {r['kernel']} | {r['specialization']} | {r['registers']} | "
                         f"{r['spilled_bytes']} | {r['shared_bytes']} | {r['num_warps']} | "
                         f"{r['blocks_per_sm']} ({r['limited_by']}) | {100 * r['occupancy']:.1f} % | "
                         f"{r['ptx_bytes']} | {loads.get('vector', '?')} / {loads.get('scalar', '?')} "
                         f"({loads.get('widest_bits', '?')} bits) |")
        ok = [r for r in rows if not r.get("error")]
        if ok:
            regs = [r["registers"] for r in ok]
            lines += ["", f"{len(rows)} specializations, {len(rows) - len(ok)} compile errors; "
                      f"registers {min(regs)}-{max(regs)}, lowest occupancy "
                      f"{100 * min(r['occupancy'] for r in ok):.1f} %.", ""]
    bad = failures(records)
    lines += ["## Verdict", "", "PASS" if not bad else "FAIL:", ""]
    lines += [f"- {b}" for b in bad]
    return "\n".join(lines) + "\n"


def build(archs: Sequence[str], out_dir: Path, *, timeout: float | None = None,
          sample: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """Compile for `archs` (every specialization, or the `covering` sample), write
    out_dir/build.json and build.md; (records, failures)."""
    from kimi_oracle.core.files import atomic_write_many, to_json

    records = run_build(archs, timeout=timeout, sample=sample)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_many({out_dir / "build.json": to_json(records), out_dir / "build.md": render_markdown(records)})
    return records, failures(records)
