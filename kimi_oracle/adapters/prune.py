"""A pruned copy of an engine's release: only the files its adapter loads (issue 45).

The device a check runs on reaches no registry, and the device tool carries at most 64 MiB with a
run. An adapter that runs an engine's files as shipped with stand-ins for the rest of it
(`adapters.loading`) needs only those files: `prune(spec, out)` copies them, with the package's
`__init__.py` and the release's `.dist-info` name (its version, as `sources.tree_version` reads
it; only `METADATA` inside), into `out`, which then loads as `ENGINE@out` like the release.

`PRUNABLE` names the files per engine: SGLang's image paths and request layer; LMDeploy's glue.
Engines whose adapter imports the real package (transformers, vLLM through transformers,
PaddleFormers and mlx-vlm through their runtimes) cannot be pruned this way: a CandidateError.
A pruned tree larger than `MAX_BYTES` (10 MB) is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kimi_oracle.adapters import lmdeploy as _lmdeploy
from kimi_oracle.adapters import sglang as _sglang
from kimi_oracle.adapters import sglang_requests as _requests
from kimi_oracle.adapters.sources import Tree
from kimi_oracle.core.errors import CandidateError

MAX_BYTES = 10 * 1024 * 1024
PRUNABLE: dict[str, tuple[str, ...]] = {
    "sglang": tuple(dict.fromkeys((_sglang.K25_FILE, _sglang.K3_FILE, *_sglang.KERNEL_FILES, *_requests.FILES))),
    "lmdeploy": (_lmdeploy.MODEL_FILE, _lmdeploy.BASE_FILE, _lmdeploy.MEDIA_FILE, _lmdeploy.ENGINE_FILE,
                 *_lmdeploy.HELPERS),
}


def prune(spec: str, out: Path) -> tuple[Path, int]:
    """(the pruned tree's root, its size in bytes) of `spec`'s release, written to `out` (a new
    or empty directory; published whole, by one rename); CandidateError otherwise."""
    from kimi_oracle.adapters.engines import load_tree

    engine, _, tree = load_tree(spec)
    files = PRUNABLE.get(engine.name)
    if files is None:
        raise CandidateError(f"engine {engine.name}: its adapter imports the real package, so it cannot be pruned "
                             f"(prunable: {', '.join(PRUNABLE)})")
    if out.exists() and any(out.iterdir()):
        raise CandidateError(f"prune: {out} exists and is not empty")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".prune-", dir=out.parent))
    try:
        size = _copy(tree, files, staging)
        if size > MAX_BYTES:
            raise CandidateError(f"prune: {size} bytes > {MAX_BYTES} (the files of {engine.name}'s adapter)")
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out, size


def _copy(tree: Tree, files: tuple[str, ...], target: Path) -> int:
    size = 0
    for relative in ("__init__.py", *files):
        source = tree.file(relative)
        if not source.is_file():
            raise CandidateError(f"engine {tree.engine} ({tree.root}): no file {tree.package}/{relative} to prune")
        dest = target / tree.package / relative
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest)
        size += dest.stat().st_size
    for info in sorted(tree.root.glob(f"{tree.package}-*.dist-info"))[:1]:
        (target / info.name).mkdir()
        if (info / "METADATA").is_file():
            shutil.copy2(info / "METADATA", target / info.name / "METADATA")
            size += (info / "METADATA").stat().st_size
    return size


__all__ = ["MAX_BYTES", "PRUNABLE", "prune"]
