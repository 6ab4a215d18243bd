"""`kimi-oracle nightly --ray ADDRESS|auto`: the campaign's workers placed on a Ray cluster.

Each worker is the existing nightly worker (`python -m kimi_oracle.workflows.nightly --worker`,
its engine, its executor subprocess for the candidate, its limits), started by a Ray actor
(`RayWorker`) in a private scratch folder on whichever node Ray places it. The actor starts from
the campaign's shared hypothesis database and corpus (sent by the driver, so every worker replays
what any worker found before) and, while its worker runs, watches its scratch folders: each new
finding folder (whole, as bytes; again when the worker rewrites it), database entry and corpus
input goes into an outbox that the driver drains every half second. The driver alone writes
`--out`, `--corpus` and `--db`; what it has drained is on disk whatever dies afterwards.

Findings are de-duplicated across workers by their key (`oracle.grouping.finding_key`, as
case.json records it), keeping the smallest reproducer (fewest bytes of stored input). A worker
whose actor or node dies is named in the summary's `errors` (worker, engine, node, host) and the
campaign's exit code is 2; everything it sent before is kept.

The candidate spec and the folder of a candidate file reach the workers through Ray's runtime
environment (`working_dir`), never through a path that happens to exist on every node; the
finding folders the driver writes name the candidate as the driver was given it. kimi-oracle
itself (and torch) must be installed on every node, as for any Ray application.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kimi_oracle.core.errors import KimiOracleError

RAY_HINT = "pip install 'kimi-oracle[ray]'"
POLL_S = 0.5
MAX_SHARED_BYTES = 16 << 20  # one database entry or corpus input sent to the workers


class RayUnavailableError(KimiOracleError):
    """`--ray` without Ray installed, or a cluster that cannot be joined."""


def import_ray() -> Any:
    """The `ray` module, or RayUnavailableError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RayUnavailableError(f"--ray needs Ray, which is not installed: {RAY_HINT}") from None
    return ray


def connect(ray: Any, address: str, jobs: int, runtime_env: dict[str, Any]) -> str:
    """Join the cluster at `address` with the job's `runtime_env` (Ray uploads a `working_dir`
    only at the job level); `auto` joins a running cluster or starts a local one (dashboard
    off). What was joined, in words."""
    kwargs = {"log_to_driver": False, "runtime_env": runtime_env or None}
    if address != "auto":
        ray.init(address=address, **kwargs)
        return f"Ray cluster at {address}"
    try:
        ray.init(address="auto", **kwargs)
        return "the running Ray cluster"
    except (ConnectionError, RuntimeError, ValueError):
        ray.init(num_cpus=max(jobs, os.cpu_count() or 1), include_dashboard=False, **kwargs)
        return "a local Ray cluster started for this run"


def runtime_env_for(candidate: str) -> tuple[dict[str, Any], str]:
    """Ray's runtime environment shipping a candidate file's folder (`working_dir`), and the spec
    the workers use (relative to it); other specs travel as they are."""
    from kimi_oracle.core.specs import spec_path

    target = spec_path(candidate)
    if target is None:
        return {}, candidate
    path = Path(target).resolve()
    if not path.is_file():
        raise RayUnavailableError(f"candidate file {target} does not exist")
    return {"working_dir": str(path.parent)}, path.name + candidate[len(target):]


def _files(root: Path) -> dict[str, Path]:
    """Plain files under `root` by relative path (hidden names and their folders skipped)."""
    if not root.is_dir():
        return {}
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if path.is_file() and not path.is_symlink() and not any(part.startswith(".") for part in rel.parts):
            out[str(rel)] = path
    return out


def snapshot(root: Path) -> dict[str, bytes]:
    """The files of a database or corpus folder, to send to the workers."""
    return {rel: p.read_bytes() for rel, p in _files(root).items() if p.stat().st_size <= MAX_SHARED_BYTES}


class RayWorker:
    """A Ray actor running one nightly worker subprocess in a scratch folder (threaded: `drain`
    answers while `run` runs)."""

    def __init__(self, spec: dict[str, Any], shared_db: dict[str, bytes], shared_corpus: dict[str, bytes]):
        self.root = Path(tempfile.mkdtemp(prefix="kimi-oracle-ray-"))
        self.dirs = {name: self.root / name for name in ("out", "db", "corpus", "work")}
        for name, files in (("db", shared_db), ("corpus", shared_corpus)):
            for rel, data in files.items():
                target = self.dirs[name] / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        for d in self.dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        self.sent = {f"{name}/{rel}": "" for name in ("db", "corpus") for rel in _files(self.dirs[name])}
        self.spec = {**spec, **{k: str(v) for k, v in self.dirs.items()}, "runner_pid": os.getpid()}
        self.outbox: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()

    def where(self) -> dict[str, Any]:
        """The node, host and pid this worker runs on."""
        import ray

        return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}

    def run(self) -> dict[str, Any]:
        """Run the worker to its end; its status, exit code and log tail (the outbox filled meanwhile)."""
        from kimi_oracle.workflows.nightly.spec import WorkerSpec

        spec_path = self.dirs["work"] / "spec.json"
        WorkerSpec.from_dict(self.spec).write(spec_path)
        log_path = self.dirs["work"] / "worker.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "kimi_oracle.workflows.nightly", "--worker", str(spec_path)],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            while proc.poll() is None:
                self._scan()
                time.sleep(POLL_S)
        self._scan()
        status = (self.dirs["work"] / "status.json")
        return {"returncode": proc.returncode, "status": status.read_bytes() if status.is_file() else b"",
                "log": log_path.read_bytes()[-65536:]}

    def drain(self) -> list[tuple[str, str, Any]]:
        """What was made since the last call: ("finding", id, {file: bytes}), ("db"|"corpus", path, bytes)."""
        with self.lock:
            items, self.outbox = self.outbox, []
        return items

    def close(self) -> None:
        """Remove the scratch folder."""
        shutil.rmtree(self.root, ignore_errors=True)

    def _scan(self) -> None:
        items: list[tuple[str, str, Any]] = []
        findings = self.dirs["out"] / "findings"
        for folder in sorted(findings.iterdir()) if findings.is_dir() else []:
            if folder.name.startswith(".") or not (folder / "case.json").is_file():
                continue
            files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.is_symlink()}
            digest = hashlib.sha256(b"".join(k.encode() + v for k, v in sorted(files.items()))).hexdigest()
            if self.sent.get(f"finding/{folder.name}") != digest:
                self.sent[f"finding/{folder.name}"] = digest
                items.append(("finding", folder.name, files))
        for name in ("db", "corpus"):
            for rel, path in _files(self.dirs[name]).items():
                if f"{name}/{rel}" not in self.sent:
                    self.sent[f"{name}/{rel}"] = ""
                    items.append((name, rel, path.read_bytes()))
        if items:
            with self.lock:
                self.outbox += items


def ray_worker_class(ray: Any, num_gpus: float) -> Any:
    """`RayWorker` as a Ray actor class: one CPU, `num_gpus` GPUs, `drain` concurrent with `run`."""
    return ray.remote(num_cpus=1, num_gpus=num_gpus, max_concurrency=2, max_restarts=0)(RayWorker)


def default_gpus(candidate: str) -> float:
    """One GPU per worker for the CUDA candidate (`gpu`), none otherwise."""
    return 1.0 if candidate.strip() == "gpu" else 0.0


__all__ = ["RAY_HINT", "RayUnavailableError", "RayWorker", "connect", "default_gpus", "import_ray",
           "ray_worker_class", "runtime_env_for", "snapshot"]

