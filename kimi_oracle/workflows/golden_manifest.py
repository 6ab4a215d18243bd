"""The golden files' manifest: their SHA-256 as `golden regen --accept` wrote them, checked first.

`golden check` (and the gate's golden stage) reads every golden file it compares, and hashes it,
before any candidate runs (`read_goldens`); the comparison uses those bytes, never the files
again. `verify` compares the hashes with `<golden dir>/manifest.json`: a golden file whose hash
differs (or that the manifest lacks, or a directory without a manifest) is a problem naming the
file. After the candidate has run, `changed_since` hashes the files again: a golden file that
changed meanwhile (a candidate that rewrote it) is a problem naming it too. `write_manifest` is
called by `golden regen --accept`, in the same atomic write as the golden files it replaces.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Iterable, Mapping

from kimi_oracle.core.errors import InputError
from kimi_oracle.core.files import load_json, read_file, to_json

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "kimi-oracle.golden-manifest"
MANIFEST_SCHEMA_VERSION = 1
MAX_GOLDEN_BYTES = 64 << 20  # one golden file (ours are under 1 MB)
KIND_DIRS = ("grids", "pixels", "video")


def relative_name(kind: str, profile: str) -> str:
    """A golden file's name in the manifest: `pixels/k3.jsonl`."""
    return f"{kind}/{profile}.jsonl"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_goldens(golden_dir: Path, names: Iterable[str]) -> dict[str, bytes | None]:
    """The bytes of each named golden file (None: missing), through the one reader of user files
    (regular files only, capped); an unreadable file is an `InputError` naming it."""
    out: dict[str, bytes | None] = {}
    for name in names:
        path = Path(golden_dir) / name
        if not path.exists() and not path.is_symlink():
            out[name] = None
            continue
        out[name] = read_file(path, max_bytes=MAX_GOLDEN_BYTES)
    return out


def read_manifest(golden_dir: Path) -> dict[str, str] | None:
    """name -> sha256 from the manifest (None when there is none); `InputError` when malformed."""
    path = Path(golden_dir) / MANIFEST_NAME
    if not path.exists() and not path.is_symlink():
        return None
    data: Any = load_json(path, max_bytes=1 << 20)
    if not isinstance(data, Mapping) or data.get("schema") != MANIFEST_SCHEMA:
        raise InputError(f"not a golden manifest (schema must be {MANIFEST_SCHEMA!r})", source=str(path))
    if data.get("schema_version") != MANIFEST_SCHEMA_VERSION:
        raise InputError(f"schema_version: must be {MANIFEST_SCHEMA_VERSION}", source=str(path))
    files = data.get("files")
    if not isinstance(files, Mapping):
        raise InputError("files: must be an object", source=str(path))
    out: dict[str, str] = {}
    for name, entry in files.items():
        digest = entry.get("sha256") if isinstance(entry, Mapping) else None
        if not isinstance(digest, str) or len(digest) != 64:
            raise InputError(f"files.{name}.sha256: must be a SHA-256 hex digest", source=str(path))
        out[str(name)] = digest
    return out


def verify(golden_dir: Path, contents: Mapping[str, bytes | None]) -> dict[str, str]:
    """name -> problem for each read golden file that does not match the manifest."""
    try:
        manifest = read_manifest(golden_dir)
    except InputError as exc:
        return {name: f"the golden manifest is unusable: {exc}" for name in contents}
    problems: dict[str, str] = {}
    for name, data in contents.items():
        if manifest is None:
            problems[name] = (f"no {MANIFEST_NAME} in the golden directory: its files cannot be trusted "
                              "(`golden regen --accept` writes it)")
        elif data is None:
            continue  # (a missing file is reported as such)
        elif name not in manifest:
            problems[name] = f"{name} is not in {MANIFEST_NAME} (`golden regen --accept` writes it)"
        elif sha256(data) != manifest[name]:
            problems[name] = (f"{name} changed since `golden regen --accept` wrote it: sha256 {sha256(data)[:16]}..., "
                              f"{MANIFEST_NAME} says {manifest[name][:16]}...")
    return problems


def changed_since(golden_dir: Path, contents: Mapping[str, bytes | None]) -> dict[str, str]:
    """name -> problem for each golden file whose bytes differ now from `contents` (read before the
    candidate ran): the check used what was read first."""
    problems: dict[str, str] = {}
    for name, before in contents.items():
        path = Path(golden_dir) / name
        try:
            now: bytes | None = read_file(path, max_bytes=MAX_GOLDEN_BYTES) if path.exists() else None
        except InputError as exc:
            now = f"unreadable: {exc}".encode()
        if now != before:
            problems[name] = (f"{name} changed while the candidate ran (a candidate rewrote a golden file?): "
                              "the check used the content read before it ran; restore the file")
    return problems


def manifest_text(golden_dir: Path, replaced: Mapping[str, str | bytes] | None = None) -> str:
    """The manifest of every golden file under `golden_dir` (`grids/*.jsonl`, `pixels/*.jsonl`,
    `video/*.jsonl`),
    with `replaced` (name -> the new text about to be written) standing for the files it names."""
    replaced = dict(replaced or {})
    files: dict[str, dict[str, Any]] = {}
    names = {str(p.relative_to(golden_dir)) for kind in KIND_DIRS for p in Path(golden_dir).glob(f"{kind}/*.jsonl")}
    for name in sorted(names | set(replaced)):
        data = replaced.get(name)
        raw = data.encode("utf-8") if isinstance(data, str) else data
        if raw is None:
            raw = read_file(Path(golden_dir) / name, max_bytes=MAX_GOLDEN_BYTES)
        files[name] = {"sha256": sha256(raw), "bytes": len(raw)}
    return to_json({"schema": MANIFEST_SCHEMA, "schema_version": MANIFEST_SCHEMA_VERSION, "files": files})


__all__ = ["MANIFEST_NAME", "MANIFEST_SCHEMA", "changed_since", "manifest_text", "read_goldens", "read_manifest",
           "relative_name", "verify"]
