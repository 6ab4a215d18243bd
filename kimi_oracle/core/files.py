"""Files that are never half-written, the one reader of user files, JSON, and library versions.

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
import re
import stat
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from kimi_oracle.core.errors import InputError, WriteError

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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    except WriteError:
        raise
    except OSError as exc:
        raise WriteError(str(path), exc) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            _write_chunks(fh, data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _file_mode(path))
    except OSError as exc:  # (a full disk, the file-size limit: one line naming the file)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, WriteError):
            raise
        raise WriteError(str(path), exc) from None
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


# ---------------------------------------------------------------------------------------------
# reading user files: `--known`, `--config`, spec files, corpus files, finding folders
#
# Every file a user hands us is read by `read_file`: a regular file only (a FIFO, a device such as
# /dev/zero behind a link, a directory or a socket is refused unread, at once), at most a byte cap
# (read in chunks: a file that grows while read is still capped). `load_json` and `load_toml` parse
# it with a bound on nesting and check every number: an `InputError` names the key at fault.

# The largest file read as an image (core.images): an uncompressed image at Pillow's default
# bomb threshold (2 × 89,478,485 pixels) of 3 bytes a pixel, rounded up.
DEFAULT_MAX_BYTES = 512 << 20
MAX_DOCUMENT_BYTES = 16 << 20  # a JSON or TOML document we read from a user
MAX_NESTING = 64  # arrays and tables/objects inside each other
MAX_INTEGER = 2**63  # integers beyond +-this are refused (a 400-digit number names its key)


def read_file(path: str | os.PathLike, *, max_bytes: int = DEFAULT_MAX_BYTES, name: str | None = None) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; anything else (a FIFO, a device such
    as /dev/zero, a directory, a socket, a larger file) is refused with `InputError`, unread."""
    label = name or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise InputError("no such file", source=label) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", source=label) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=label) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError("is a directory, not a file", source=label)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"not a regular file ({_file_kind(st.st_mode)}): refused unread", source=label)
        if st.st_size > max_bytes:
            raise InputError(f"file of {st.st_size} bytes exceeds the byte cap of {max_bytes}", source=label)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise InputError(f"file exceeds the byte cap of {max_bytes}", source=label)
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=label) from None
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a plain file"


def read_text(path: str | os.PathLike, *, max_bytes: int = MAX_DOCUMENT_BYTES, name: str | None = None) -> str:
    """`read_file` decoded as UTF-8 (`InputError` otherwise)."""
    label = name or str(path)
    try:
        return read_file(path, max_bytes=max_bytes, name=label).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc}", source=label) from None


def load_json(path: str | os.PathLike, *, max_bytes: int = MAX_DOCUMENT_BYTES, name: str | None = None) -> Any:
    """A JSON document from a user's file (`read_file`, then `parse_json`)."""
    label = name or str(path)
    return parse_json(read_text(path, max_bytes=max_bytes, name=label), label)


def load_toml(path: str | os.PathLike, *, max_bytes: int = MAX_DOCUMENT_BYTES, name: str | None = None) -> Any:
    """A TOML document from a user's file (`read_file`, then `parse_toml`)."""
    label = name or str(path)
    return parse_toml(read_text(path, max_bytes=max_bytes, name=label), label)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, label: str) -> Any:
    """JSON text with nesting at most MAX_NESTING deep, no NaN/Infinity, every number checked
    (`check_numbers`); `InputError` naming the line or the key otherwise."""
    _check_nesting(text, label, toml=False)
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:  # (json.JSONDecodeError included)
        raise InputError(f"not valid JSON: {exc}", source=label) from None
    check_numbers(data, label)
    return data


def parse_toml(text: str, label: str) -> Any:
    """TOML text with nesting at most MAX_NESTING deep, every number checked (`check_numbers`)."""
    _check_nesting(text, label, toml=True)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", source=label) from None
    check_numbers(data, label)
    return data


# The tokens `_check_nesting` looks at: strings (skipped whole; an unterminated one runs to the
# end of the text, a final lone backslash included: without it, a string that cannot end would
# be scanned again from each escaped quote inside it, quadratic time on hostile text), TOML
# comments, and the brackets. Everything else is passed over by the regular expression, not by
# Python. The loops over a string's characters are possessive (`*+`): a greedy loop keeps a
# backtracking mark per character, ~120 bytes each (a 3.4 MB string in a 4 MiB scenario.json
# took 450 MB), and these never need to give a character back.
_STRING = "|".join((
    r'"""(?:[^"\\]|\\[\s\S]|"(?!""))*+(?:"""|\\?$)',  # a multi-line basic string (escapes)
    r"'''[\s\S]*?(?:'''|$)",  # a multi-line literal string
    r'"(?:[^"\\]|\\[\s\S])*+(?:"|\\?$)',  # a basic (or JSON) string (escapes)
    r"'[^']*(?:'|$)",  # a literal string
))
_JSON_TOKENS = re.compile(_STRING + r"|[\[\]{}]")
_TOML_TOKENS = re.compile(_STRING + r"|#[^\n]*|[\[\]{}]")


def _check_nesting(text: str, label: str, *, toml: bool) -> None:
    """Refuse text whose arrays/objects nest deeper than MAX_NESTING (before a parser recurses
    into them); strings (and TOML comments) are skipped. Brackets need not balance here: the
    parser judges the syntax."""
    depth = 0
    for match in (_TOML_TOKENS if toml else _JSON_TOKENS).finditer(text):
        ch = text[match.start()]
        if ch in "[{":
            depth += 1
            if depth > MAX_NESTING:
                line = text.count("\n", 0, match.start()) + 1
                raise InputError(f"line {line}: arrays or tables nested more than {MAX_NESTING} deep", source=label)
        elif ch in "]}":
            depth = max(0, depth - 1)


def check_numbers(data: Any, label: str, key: str = "") -> None:
    """Every number in `data` finite and every integer within +-MAX_INTEGER; `InputError` naming
    the key (`known[0].max_levels`, `a.b[2]`) otherwise. `data`'s nesting is already bounded."""
    if isinstance(data, bool):
        return
    if isinstance(data, int):
        if abs(data) > MAX_INTEGER:
            raise InputError(f"{key or '<document>'}: number out of range (beyond +-2**63)", source=label)
    elif isinstance(data, float):
        if not math.isfinite(data):
            raise InputError(f"{key or '<document>'}: {data!r} is not a finite number", source=label)
    elif isinstance(data, Mapping):
        for k, v in data.items():
            check_numbers(v, label, f"{key}.{k}" if key else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            check_numbers(v, label, f"{key}[{i}]")


def check_writable(path: str | os.PathLike, what: str, *, directory: bool = False) -> None:
    """Before a run: `path` (a file, or with `directory` a folder made if missing) can be written,
    so that a long run does not end in a write error. `InputError` naming the option otherwise."""
    path = Path(path)
    if directory:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"{what}: cannot create the directory: {exc.strerror or exc}", source=str(path)) from None
        folder = path
    else:
        if path.is_dir():
            raise InputError(f"{what}: is a directory, not a file", source=str(path))
        folder = path.parent
        if folder.exists() and not folder.is_dir():
            raise InputError(f"{what}: cannot be written: {folder} is a file, not a directory", source=str(path))
        if not folder.is_dir():
            raise InputError(f"{what}: the directory {folder} does not exist", source=str(path))
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".kimi-write-check-", suffix=TMP_SUFFIX)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"{what}: cannot write there: {exc.strerror or exc}", source=str(path)) from None
