"""Files that are never half-written, JSON as every report writes it, and library versions.

Every file the tool records (findings, corpus entries, golden files, summaries, reports) goes
through `atomic_write_many`: staged next to its target, fsynced, renamed into place, then the
directory fsynced. A crash leaves each file wholly old or wholly new; the file mode is kept.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import json
import math
import os
import platform
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import numpy as np

TMP_SUFFIX = ".tmp"


def versions() -> dict[str, str | None]:
    """Versions of Python and the libraries whose behaviour decides the outputs (a fresh dict
    each call; read from the installed metadata once per process: every finding records them)."""
    return dict(_versions())


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist, key in (("kimi-oracle", "kimi-oracle"), ("pillow", "Pillow"), ("numpy", "numpy"),
                      ("torch", "torch"), ("triton", "triton"), ("hypothesis", "hypothesis"),
                      ("atheris", "atheris")):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = None
    if out["kimi-oracle"] is None:
        from kimi_oracle import __version__

        out["kimi-oracle"] = __version__
    return out


def utc_now() -> str:
    """ISO-8601 UTC timestamp, seconds precision."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# ---------------------------------------------------------------------------------------------
# atomic writes


def _file_mode(path: Path) -> int:
    with contextlib.suppress(OSError):
        return path.stat().st_mode & 0o777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _write_chunks(fh: Any, data: bytes) -> None:
    # One place that writes a file's bytes (tests interrupt it to simulate a crash mid-write).
    step = 1 << 16
    for start in range(0, len(data), step):
        fh.write(data[start : start + step])


def _stage(path: Path, data: bytes) -> Path:
    """Write `data` to a fresh temporary file next to `path`, flushed and fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            _write_chunks(fh, data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _file_mode(path))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def fsync_dir(directory: str | os.PathLike) -> None:
    """fsync a directory so that a rename inside it survives a power loss (best effort)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_many(files: Mapping[str | os.PathLike, bytes | str]) -> None:
    """Replace every file with its content (text is UTF-8): all staged first, then each renamed
    into place. A crash leaves each file either wholly old or wholly new, never truncated; a
    failure while staging leaves every file untouched."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, content in files.items():
            # Text from data may hold lone surrogates (undecodable bytes): escaped, never fatal.
            data = content.encode("utf-8", "backslashreplace") if isinstance(content, str) else bytes(content)
            staged.append((_stage(Path(path), data), Path(path)))
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                tmp.unlink()
    for directory in {p.parent for _, p in staged}:
        fsync_dir(directory)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Replace one file atomically (temporary file, fsync, rename)."""
    atomic_write_many({Path(path): data})
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8", "backslashreplace"))


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete temporary files a killed writer left in `folder` (`.<name>.*.tmp`)."""
    removed = []
    folder = Path(folder)
    if folder.is_dir():
        for tmp in folder.glob(f".*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
    return removed


# ---------------------------------------------------------------------------------------------
# JSON


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _finite(obj: Any) -> Any:
    # JSON has no inf/nan; write them as strings so every parser reads the file.
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def to_json(obj: Any) -> str:
    """Stable, readable JSON (keys in insertion order: field order is part of readability)."""
    return json.dumps(_finite(obj), indent=2, default=_json_default, allow_nan=False) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Atomic JSON file."""
    return atomic_write_text(path, to_json(obj))
