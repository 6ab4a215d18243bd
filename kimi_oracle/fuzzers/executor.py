"""The executor (child) side of the sandbox: serve a candidate's calls, answer, time, limit memory."""

from __future__ import annotations

import faulthandler
import os
import signal
import time
from typing import Any

import torch
from PIL import Image

from kimi_oracle.core import memory
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import BackendError, CandidateError
from kimi_oracle.core.images import unpack_raw
# (their home has no torch: the nightly runner and its atheris worker use them; importable here as before)
from kimi_oracle.core.interrupts import die_with_parent, kill_group, lead_own_group  # noqa: F401
from kimi_oracle.fuzzers.confine import absolute_spec, confine, settle_output
from kimi_oracle.oracle.candidates import Candidate, CandidateCrash
from kimi_oracle.oracle.checks import CRASH
from kimi_oracle.pipelines import outputs


# ---------------------------------------------------------------------------------------------
# images and tensors across the pipe


def _pack_tensor(t: torch.Tensor) -> tuple[str, tuple[int, ...], bytes]:
    t = t.detach().cpu().contiguous()
    return str(t.dtype).replace("torch.", ""), tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes()


def _unpack_tensor(packed: tuple[str, tuple[int, ...], bytes]) -> torch.Tensor:
    dtype_name, shape, data = packed
    dtype = getattr(torch, dtype_name)
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


# ---------------------------------------------------------------------------------------------
# the executor (child side)


_DEFAULT_THREADS: int | None = None  # torch's own intra-op thread count in this executor


def candidate_threads() -> int:
    """Intra-op torch threads of a candidate's executor: KIMI_ORACLE_CANDIDATE_THREADS, default 1."""
    value = os.environ.get("KIMI_ORACLE_CANDIDATE_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else 1


def _serve(conn: Any, spec: str, fault_path: str, memory_limit_mb: int | None, workdir: str | None = None) -> None:
    # Ctrl-C in a terminal reaches the whole process group: the executor must not turn it into
    # a "crash"; its parent stops it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The parent of an executor is the fork server, which ends when the process that uses the
    # candidate ends (however it ends): a hanging executor must not outlive it.
    die_with_parent(signal.SIGKILL)
    lead_own_group()  # (whatever the candidate forks dies with its executor: sandbox._kill)
    fault_file = open(fault_path, "w")
    if workdir is not None:
        # Its own working directory and its own capped output log (fuzzers.confine): a relative
        # spec path is resolved first, against the directory the command was started in.
        load_spec = absolute_spec(spec)
        confine(workdir)
    else:
        load_spec = spec
    faulthandler.enable(file=fault_file, all_threads=True)
    # The parent sends SIGUSR1 before killing a hung executor: dump where it hangs.
    faulthandler.register(signal.SIGUSR1, file=fault_file, all_threads=True, chain=False)
    memory.bound_heap_growth()  # a reused executor judges many inputs of many sizes
    if memory_limit_mb:
        # Under the limit the process holds only what a call asks for: no kept output slabs of
        # the reference (a candidate that runs it) between calls.
        outputs.disable()
        limit_memory(memory_limit_mb)
    # One intra-op torch thread for the oracle's calls unless KIMI_ORACLE_CANDIDATE_THREADS says
    # otherwise: on 2 cores (or a busy CI runner) torch's thread pool made one small eager call
    # many times dearer (docs/measurements.md), and a verdict does not depend on it. The gate's
    # timed calls (`_timed`) run with torch's own default, as the candidate runs in production.
    global _DEFAULT_THREADS
    _DEFAULT_THREADS = torch.get_num_threads()
    torch.set_num_threads(candidate_threads())
    candidate = _load(conn, spec, load_spec)
    if candidate is None:
        return
    timing: tuple[Any, list[Image.Image]] | None = None  # (key, images) of the last timed input
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        began = time.monotonic()
        reply = _answer(candidate, spec, msg, timing)
        if workdir is not None and reply[0] != "ok":
            settle_output()  # (what it printed before failing is in its log before the answer goes)
        if msg[0] == "time":
            timing = reply[1]
            reply = reply[0]
        # Every answer carries the span this process worked on it (time.monotonic is one
        # system-wide clock): the gate's overhead is the time no candidate and no reference works.
        # (and this process's CPU seconds so far: the fuzzer's CPU split, `IsolatedCandidate.cpu_s`)
        conn.send((reply, (began, time.monotonic(), time.process_time())))


def _load(conn: Any, spec: str, load_spec: str) -> Candidate | None:
    """The executor's candidate, loaded and announced ("ready"); None when it cannot be loaded
    (the error sent instead)."""
    from kimi_oracle.oracle.candidates import load_candidate

    try:
        candidate = load_candidate(load_spec)
        candidate.spec = spec  # (reports name the spec as the user gave it)
    except (CandidateError, BackendError) as exc:
        conn.send(("error", type(exc).__name__, str(exc)))
        return None
    except Exception as exc:  # an import that fails in an unexpected way is still a load error
        conn.send(("error", "CandidateError", f"candidate {spec!r} cannot be loaded: {type(exc).__name__}: {exc}"))
        return None
    try:
        accepts = candidate.accepts
    except CandidateError as exc:  # a bad kimi_oracle_input declaration
        conn.send(("error", "CandidateError", str(exc)))
        return None
    conn.send(("ready", candidate.description, accepts))
    return candidate


def _answer(candidate: Candidate, spec: str, msg: tuple, timing: Any) -> tuple:
    """The executor's answer to one request (for "time": the answer and the timing images kept)."""
    if msg[0] == "time":
        _, key, packed_images, config = msg
        if packed_images is not None or timing is None or timing[0] != key:
            timing = (key, [unpack_raw(p) for p in packed_images or ()])
        return _timed(candidate, spec, timing[1], config), timing
    _, packed_images, config, *rest = msg
    if rest:  # the input form chosen by the caller (oracle.input_forms)
        candidate.input_form = rest[0]
    # An image opened from a file arrives as its bytes and is opened again here (frames,
    # EXIF, ICC intact): the candidate receives what it would receive in-process.
    images = [unpack_raw(p) for p in packed_images]
    try:
        out = candidate(images, config)
    except CandidateCrash as exc:
        # A failed self-check names its own check (grid_mismatch, feature_length) and stats.
        return ("raised", exc.exc_type, exc.exc_message, exc.traceback,
                getattr(exc, "check", CRASH), getattr(exc, "stats", None))
    except (CandidateError, BackendError) as exc:
        return ("error", type(exc).__name__, str(exc))
    except BaseException as exc:  # noqa: BLE001 - SystemExit or a custom BaseException: told apart by type
        crash = CandidateCrash(spec, exc)
        return ("raised", crash.exc_type, crash.exc_message, crash.traceback)
    return ("ok", _pack_tensor(out.pixel_values), _pack_tensor(out.grid_thws))


def _timed(candidate: Candidate, spec: str, images: list[Image.Image], config: PreprocessConfig) -> tuple:
    """One call of the candidate's own function on `images` (not copied, as a caller would pass
    them), timed here: the candidate's time without the transfer. CUDA work is waited for."""
    from kimi_oracle.oracle.candidates import as_result

    judging_threads = torch.get_num_threads()
    torch.set_num_threads(_DEFAULT_THREADS or judging_threads)
    try:
        t0 = time.perf_counter()
        out = candidate.func(images, config)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        as_result(out, spec)  # a timing of something that is not a result means nothing
    except (CandidateError, BackendError) as exc:
        return ("error", type(exc).__name__, str(exc))
    except BaseException as exc:  # noqa: BLE001 - the candidate's failure, told apart by type
        crash = CandidateCrash(spec, exc)
        return ("raised", crash.exc_type, crash.exc_message, crash.traceback)
    finally:
        torch.set_num_threads(judging_threads)
    return ("timed", elapsed)


def limit_memory(limit_mb: int) -> None:
    """Cap this process's address space at what is mapped now plus `limit_mb` MiB."""
    import resource

    # Address space already mapped (torch maps a lot) plus the allowance.
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[0])
        base = pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        base = 0
    limit = base + int(limit_mb) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
