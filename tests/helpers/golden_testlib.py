"""Helpers of the golden-file tests: a scratch copy of the goldens, entry edits, snapshots."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from kimi_oracle.workflows import golden

FILES = [(kind, profile) for kind in golden.KINDS for profile in ("k3", "k25", "k3-small")
         if kind != "video" or profile == "k25"]  # (the video golden: the profile with video rules)


@pytest.fixture
def golden_copy(tmp_path: Path, monkeypatch) -> Path:
    """A private copy of the committed golden files (tests may edit and regenerate it); the
    current directory is `tmp_path`, so the default output folder lands there too."""
    dest = tmp_path / "golden"
    shutil.copytree(golden.package_golden_dir(), dest, ignore=shutil.ignore_patterns("*.obtained", ".*"))
    monkeypatch.chdir(tmp_path)
    return dest


def accept_edits(golden_dir: Path) -> None:
    """Record the edited files' hashes in the manifest, as `golden regen --accept` would have when
    it wrote them (for files recorded "elsewhere": other versions, another machine)."""
    from kimi_oracle.core.files import atomic_write_text
    from kimi_oracle.workflows import golden_manifest

    atomic_write_text(golden_dir / golden_manifest.MANIFEST_NAME, golden_manifest.manifest_text(golden_dir))


def obtained_of(path: Path) -> Path:
    """Where check/regen write the .obtained file of golden file `path` (default output folder)."""
    return golden.obtained_path(golden.default_out_dir(), path.parent.name, path.name[: -len(".jsonl")])


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def key_of(kind: str, entry: dict) -> str:
    return f"{entry['width']}x{entry['height']}" if kind == "grids" else entry["id"]


def edit_entry(path: Path, kind: str, key: str, change: Callable[[dict], Any]) -> None:
    """Apply `change` to the entry with `key` (in place, or return a replacement dict)."""
    lines = read_lines(path)
    for i, line in enumerate(lines[1:], start=1):
        entry = json.loads(line)
        if key_of(kind, entry) == key:
            out = change(entry)
            lines[i] = json.dumps(out if out is not None else entry, separators=(",", ":"))
            write_lines(path, lines)
            return
    raise KeyError(key)


def edit_meta(path: Path, change: Callable[[dict], Any]) -> None:
    lines = read_lines(path)
    head = json.loads(lines[0])
    change(head["_meta"])
    lines[0] = json.dumps(head, separators=(", ", ": "))
    write_lines(path, lines)


def entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in read_lines(path)[1:]]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` (hidden ones included), relative path -> bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def mutate(entry: dict, rng: random.Random) -> str:
    """Change one leaf value of `entry` so that the entry differs; return the field's path."""
    paths: list[tuple[str, ...]] = []

    def walk(value: Any, path: tuple[str, ...]) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, path + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, path + (str(i),))
        else:
            paths.append(path)

    walk(entry, ())
    path = rng.choice(paths)
    parent: Any = entry
    for part in path[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last: Any = int(path[-1]) if isinstance(parent, list) else path[-1]
    value = parent[last]
    if isinstance(value, bool):
        parent[last] = not value
    elif isinstance(value, int):
        # Sizes move far away, so that the edited key exists nowhere else in the file.
        parent[last] = value + (100003 if path[-1] in ("width", "height") else 1)
    elif isinstance(value, float):
        parent[last] = value + 0.5
    elif isinstance(value, str) and path[-1] == "sha256":
        parent[last] = ("0" if value[0] != "0" else "1") + value[1:]
    elif isinstance(value, str):
        parent[last] = value + "~edited"
    else:
        parent[last] = 0
    return ".".join(path)
