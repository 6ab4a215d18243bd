"""Options and helpers shared by several subcommands."""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import click

from kimi_oracle.core.config import PROFILES, PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT, start_timeout


def out_dir_callback(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """An output folder that can be made: refused before any work (exit 2, naming the option)
    when it, or the nearest of its parents that exists, is not a writable directory (`--out
    afile/x` failed only after the whole run, as an internal error)."""
    if value is None:
        return None
    probe = Path(value)
    while not probe.exists():
        if probe.is_symlink():  # (a dangling link)
            raise click.BadParameter(f"{value}: {probe} is a link to nothing", ctx=ctx, param=param)
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        where = "is a file" if probe == Path(value) else f"cannot be made: {probe} is a file, not a directory"
        raise click.BadParameter(f"{value} {where}", ctx=ctx, param=param)
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise click.BadParameter(f"{value}: {probe} is not writable", ctx=ctx, param=param)
    return value


def check_outputs(out_dir: Path | None, json_path: Path | None, junit_path: Path | None) -> None:
    """The paths a run writes, checked before it starts (InputError, exit 2, naming the option):
    `--json afile/x` failed only after the whole run."""
    from kimi_oracle.core.files import check_writable

    if out_dir is not None:
        check_writable(out_dir, "--out", directory=True)
    for option, path in (("--json", json_path), ("--junit", junit_path)):
        if path is not None and str(path) != "-":
            check_writable(path, option)


def profile_options(func):
    """Add `--profile k3|k25` and `--config FILE` (mutually exclusive)."""
    func = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="A checkpoint's preprocessor_config.json (overrides --profile).",
    )(func)
    func = click.option(
        "--profile",
        type=click.Choice(PROFILES),
        default=None,
        help="Built-in profile (default: k3; k3-small is K3 with a 16-patch budget).",
    )(func)
    return func




def isolation_options(func):
    """Add `--case-timeout` and `--memory-limit`: the candidate always runs in a separate,
    reused process; these bound each call."""
    func = click.option(
        "--memory-limit", "memory_limit_mb", type=click.IntRange(64, None), default=None, metavar="MB",
        help="Address space the candidate's process may add, in MiB (default: no limit; a CUDA "
             "candidate needs none). Running out of it is a crash finding.")(func)
    func = click.option(
        "--case-timeout", "case_timeout", default=DEFAULT_CASE_TIMEOUT, show_default=True,
        callback=lambda ctx, param, value: parse_duration(value),
        help="Longest one call of the candidate may take; a call that takes longer is a timeout "
             "finding (its process is killed and restarted).")(func)
    return func


def oracle_options(func):
    """Add `--oracle reference|gpu` and `--oracle-check-share` (`oracle.gpu_oracle`)."""
    func = click.option(
        "--oracle-check-share", "oracle_check_share", type=click.FloatRange(0.0, 1.0), default=0.05,
        show_default=True, help="With --oracle gpu: the share of examples the CPU reference recomputes (it "
                                "also recomputes every failure before it is reported).")(func)
    return click.option(
        "--oracle", "oracle_name", type=click.Choice(["reference", "gpu"]), default="reference", show_default=True,
        help="Where the expected outputs come from: the CPU reference, or (on a CUDA machine) the project's GPU "
             "pipeline, checked by the reference on a sample and on every failure; a disagreement is an "
             "oracle_disagreement finding and the run falls back to the reference.")(func)


def make_oracle(name: str, check_share: float, seed: int | None) -> Any:
    """The `FuzzOptions.oracle` of `--oracle NAME` (None: the reference); KimiOracleError (exit 2,
    one line) for `gpu` without a CUDA device."""
    if name == "reference":
        return None
    if not cuda_visible():
        from kimi_oracle.core.errors import KimiOracleError

        raise KimiOracleError("--oracle gpu needs a CUDA device (none is visible here); "
                              "use --oracle reference")
    from kimi_oracle.oracle.gpu_oracle import GpuOracle

    return GpuOracle(check_share=check_share, seed=seed or 0, device="cuda")


def interpret_option(func):
    """Add `--interpret/--no-interpret` (commands that run candidates only; never `gpu build`)."""
    return click.option(
        "--interpret/--no-interpret", "interpret", default=None,
        help="Run the candidate's Triton kernels under the Triton interpreter: TRITON_INTERPRET=1 is set "
             "before the candidate is imported. Default: on when no CUDA device is visible (said once on "
             "stderr), off otherwise; an explicit TRITON_INTERPRET in the environment is kept.")(func)


_INTERPRET_ANNOUNCED = False


# What a GPU that torch can use leaves on Linux once its driver is loaded: NVIDIA's kernel module
# (its /proc and /sys entries exist even before nvidia-modprobe makes the device files), its device
# files, a Jetson's, ROCm's (amdgpu, /dev/kfd) and WSL2's /dev/dxg. None of them: no GPU.
_GPU_NODES = ("/proc/driver/nvidia", "/sys/module/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/nvhost-ctrl-gpu",
              "/dev/nvgpu", "/sys/module/amdgpu", "/dev/kfd", "/dev/dxg")


def gpu_device_nodes() -> bool:
    """Whether this machine may have a GPU: a GPU driver's module or device file exists (Linux),
    or the platform is another (not known without asking torch)."""
    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(node) for node in _GPU_NODES)


def cuda_visible() -> bool:
    """True when a CUDA device is visible to torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    if not gpu_device_nodes():
        return False  # (no GPU driver loaded at all: answered without importing torch)
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA install is no device
        return False


def setup_interpret(flag: bool | None) -> bool:
    """Set (or clear) TRITON_INTERPRET for the candidate processes this command starts, before
    any candidate is imported; returns whether the interpreter is on. `None` (no option given):
    an explicit TRITON_INTERPRET is kept, otherwise the interpreter is turned on when no CUDA
    device is visible, announced once on stderr."""
    global _INTERPRET_ANNOUNCED
    if flag is None:
        if "TRITON_INTERPRET" in os.environ:
            return os.environ["TRITON_INTERPRET"] == "1"
        if cuda_visible():
            return False
        flag = True
        if not _INTERPRET_ANNOUNCED:
            _INTERPRET_ANNOUNCED = True
            click.echo("note: no CUDA device is visible: candidates run with TRITON_INTERPRET=1 (the Triton "
                       "interpreter); --no-interpret turns this off", err=True)
    if flag:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    return flag


def open_candidate(spec: str, case_timeout: float, memory_limit_mb: int | None, budget_s: float | None = None):
    """The candidate `spec`, started in its own process (CandidateError, exit 2, if it cannot load;
    also when loading it takes longer than `budget_s`, when given, or 120 s)."""
    from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

    candidate = IsolatedCandidate(spec, timeout_s=case_timeout, memory_limit_mb=memory_limit_mb,
                                  start_timeout_s=start_timeout(budget_s))
    candidate.start()
    return candidate


def resolve_config(profile: str | None, config_path: Path | None) -> PreprocessConfig:
    """The configuration chosen by `--profile` / `--config`."""
    return PreprocessConfig.resolve(profile, config_path)


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|min|m|h)?")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds from `90`, `90s`, `10m`, `1.5h`, `1h30m`; a clear usage error otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        raw = str(text).strip().lower().replace(" ", "")
        parts = list(_DURATION.finditer(raw))
        if not raw or "".join(p.group(0) for p in parts) != raw:
            raise click.BadParameter(f"{text!r}: expected a duration such as 90s, 10m, 1.5h or 1h30m")
        value = sum(float(p.group(1)) * _UNITS[p.group(2)] for p in parts)
    if not value > 0:
        raise click.BadParameter(f"{text!r}: the duration must be positive")
    if not math.isfinite(value):
        raise click.BadParameter(f"{text!r}: the duration must be finite")
    return value


# `--margin` and `--perf-threshold` (docs/gate.md): a finite percentage from 0 to this. `nan%`,
# `inf%` or `1e309%` would turn every `worse` / slower check off.
MAX_PERCENT = 1000.0
_PERCENT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)%?")


def parse_percent(text: str | float) -> float:
    """Percent from `10%` or `10`: a finite number from 0 to MAX_PERCENT, a usage error otherwise
    (nan, inf, exponents, signs and anything else are refused)."""
    raw = str(text).strip()
    if not _PERCENT.fullmatch(raw):
        raise click.BadParameter(f"{text!r}: expected a percentage from 0 to {MAX_PERCENT:g} such as 10%")
    value = float(raw.rstrip("%"))
    if not math.isfinite(value) or value > MAX_PERCENT:
        raise click.BadParameter(f"{text!r}: the percentage must be from 0 to {MAX_PERCENT:g}")
    return value
