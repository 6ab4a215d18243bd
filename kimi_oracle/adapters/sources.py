"""Where an engine's code comes from: `ENGINE` (the installed package) or `ENGINE@SOURCE`.

SOURCE is a wheel file (unpacked once into the cache), a directory holding the package
(site-packages layout: `DIR/sglang/__init__.py`), a git checkout in the project's own layout
(`DIR/python/sglang`, `DIR/src/transformers`), or a released version (`sglang@0.5.23`), fetched
once with `pip download --no-deps` into the cache directory: `$KIMI_ORACLE_ENGINE_CACHE`, else
`$XDG_CACHE_HOME/kimi-oracle/engines`, else `~/.cache/kimi-oracle/engines`.

Nothing here imports the engine: a `Tree` is the directory that holds its package, and its
version as the tree itself states it (a `.dist-info` beside it, or its `_version.py` /
`__init__.py` text). A source that cannot be found or fetched is a CandidateError (exit 2).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from kimi_oracle.core.errors import CandidateError

CACHE_ENV = "KIMI_ORACLE_ENGINE_CACHE"
# A released version as pip names one (PEP 440's common shapes): 0.5.23, 5.23.0, 0.33.0rc1.
_VERSION_RE = re.compile(r"^\d+(\.\d+)*([abc]|rc|\.post|\.dev)?\d*$")
_VERSION_TEXT = re.compile(r"""^\s*(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""",
                           re.M)
# A checkout keeps its package under one of these (SGLang: python/, transformers and vLLM: src/ or root).
_CHECKOUT_DIRS = ("", "python", "src")


@dataclass(frozen=True)
class Tree:
    """An engine's code on disk: `root` holds the package directory `root/package`."""

    engine: str
    package: str
    root: Path
    version: str | None
    origin: str  # "installed", "wheel", "directory", "checkout", "release"

    @property
    def package_dir(self) -> Path:
        """The package's own directory."""
        return self.root / self.package

    def file(self, relative: str) -> Path:
        """A file of the package by its path inside it (`srt/models/kimi_k3.py`)."""
        return self.package_dir / relative


def cache_dir() -> Path:
    """The engines' cache directory (not created here)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kimi-oracle" / "engines"


def split_engine_spec(spec: str) -> tuple[str, str | None]:
    """(`ENGINE` or `ENGINE-PATH`, SOURCE or None) of `ENGINE[-PATH][@SOURCE]`."""
    name, sep, source = spec.partition("@")
    return name, (source if sep else None)


def tree_version(root: Path, package: str) -> str | None:
    """The version a tree states without being imported: a `PACKAGE-V.dist-info` beside the
    package, else a version assignment in `_version.py`, `version.py` or `__init__.py`."""
    for info in sorted(root.glob(f"{package}-*.dist-info")):
        return info.name[len(package) + 1:-len(".dist-info")]
    for name in ("_version.py", "version.py", "__init__.py"):
        path = root / package / name
        if path.is_file():
            found = _VERSION_TEXT.search(path.read_text(encoding="utf-8", errors="replace")[:200_000])
            if found:
                return found.group(1)
    return None


def _installed(engine: str, package: str) -> Tree:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise CandidateError(f"engine {engine!r}: package {package!r} is not installed here; "
                             f"give {engine}@VERSION (fetched with pip download) or {engine}@PATH")
    package_dir = Path(list(spec.submodule_search_locations)[0])
    root = package_dir.parent
    try:
        version: str | None = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        version = tree_version(root, package)
    return Tree(engine, package, root, version, "installed")


def _unpack_wheel(engine: str, package: str, wheel: Path) -> Path:
    digest = hashlib.sha256(str(wheel.resolve()).encode() + str(wheel.stat().st_size).encode()).hexdigest()[:12]
    target = cache_dir() / "trees" / f"{wheel.stem}-{digest}"
    if (target / package).is_dir():
        return target

    def members(archive: zipfile.ZipFile) -> list[str]:
        names = [n for n in archive.namelist() if n.startswith((f"{package}/", f"{package}-"))]
        if not any(n.startswith(f"{package}/") for n in names):
            raise CandidateError(f"engine {engine!r}: wheel {wheel} holds no package {package!r}")
        return names

    return _unpack([wheel], target, members, f"engine {engine!r}: {wheel} is not a wheel (not a zip file)")


def _unpack(wheels: Sequence[Path], target: Path, members: Any, not_a_wheel: str) -> Path:
    """`members(archive)` of each wheel extracted into a staging folder published as `target`
    (one rename); CandidateError `not_a_wheel` when one is not a zip file."""
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=_made(target.parent)))
    try:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(staging, members=members(archive))
        _publish(staging, target)
    except zipfile.BadZipFile:
        raise CandidateError(not_a_wheel) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _publish(staging: Path, target: Path) -> None:
    # One rename: a reader sees the whole folder or none. A process that got there first (two
    # test workers fetching the same release) already published the same content: keep theirs.
    try:
        os.replace(staging, target)
    except OSError:
        if not target.is_dir():
            raise


def _made(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CandidateError(f"engine cache {path} cannot be created: {exc.strerror or exc}") from None
    return path


def fetch_release(engine: str, package: str, version: str) -> Path:
    """The wheel of `package==version`, downloaded once into the cache with `pip download --no-deps`."""
    return fetch_wheels(f"engine {engine}@{version}", f"{package}-{version}", [f"{package}=={version}"])[0]


def fetch_wheels(what: str, name: str, requirements: Sequence[str]) -> list[Path]:
    """The wheels of pinned `requirements` (`pkg==version`), downloaded once, all in one `pip download
    --no-deps` into the cache folder `wheels/name`; CandidateError (`what`: ...) when pip cannot."""
    folder = cache_dir() / "wheels" / name
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if len(wheels) >= len(requirements):
        return wheels
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=_made(folder.parent)))
    try:
        run = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                              "-q", *requirements, "-d", str(staging)],
                             capture_output=True, text=True, check=False)
        if run.returncode != 0 or len(list(staging.glob("*.whl"))) < len(requirements):
            last = (run.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise CandidateError(f"{what}: pip download --no-deps {' '.join(requirements)} failed: {last}")
        shutil.rmtree(folder, ignore_errors=True)  # (a folder left incomplete by hand)
        _publish(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(folder.glob("*.whl"))


def unpacked_site(what: str, name: str, requirements: Sequence[str]) -> Path:
    """A site directory `deps/name` in the cache holding the wheels of pinned `requirements`
    (`fetch_wheels`), each unpacked whole (its packages, `.libs` and `.dist-info`; no `.data`),
    made once; for an engine's own process to put on `sys.path`, never the oracle's."""
    target = cache_dir() / "deps" / name
    if target.is_dir():
        return target
    wheels = fetch_wheels(what, name, requirements)
    return _unpack(wheels, target, lambda archive: [n for n in archive.namelist()
                                                    if not n.split("/")[0].endswith(".data")],
                   f"{what}: a downloaded file in {wheels[0].parent} is not a wheel")


def _directory(engine: str, package: str, path: Path) -> tuple[Path, str]:
    if path.name == package and (path / "__init__.py").is_file():
        return path.parent, "directory"
    for sub in _CHECKOUT_DIRS:
        if (path / sub / package / "__init__.py").is_file():
            return path / sub, ("checkout" if sub or (path / ".git").exists() else "directory")
    raise CandidateError(f"engine {engine!r}: {path} holds no package {package!r} (looked for "
                         f"{', '.join(str(Path(s) / package) for s in _CHECKOUT_DIRS)})")


def locate(engine: str, package: str, source: str | None) -> Tree:
    """The tree of `engine` from `source` (None: the installed package); CandidateError otherwise."""
    if source is None:
        return _installed(engine, package)
    if not source:
        raise CandidateError(f"engine spec {engine}@ names no source; give a version, a wheel or a directory")
    path = Path(source).expanduser()
    if _VERSION_RE.match(source) and not path.exists():
        root = _unpack_wheel(engine, package, fetch_release(engine, package, source))
        return Tree(engine, package, root, tree_version(root, package) or source, "release")
    if path.is_file() and path.suffix == ".whl":
        root = _unpack_wheel(engine, package, path)
        return Tree(engine, package, root, tree_version(root, package), "wheel")
    if path.is_dir():
        root, origin = _directory(engine, package, path)
        return Tree(engine, package, root, tree_version(root, package), origin)
    raise CandidateError(f"engine {engine}@{source}: no such wheel, directory or released version")


__all__ = ["CACHE_ENV", "Tree", "cache_dir", "fetch_release", "fetch_wheels", "locate", "split_engine_spec", "tree_version",
           "unpacked_site"]
