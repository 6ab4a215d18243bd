"""One function run in a forked process, for the fuzzers whose candidate runs in the fuzzing loop
itself (a chunker, a video candidate, a video planner): what kills that process or hangs past its
time ends as an error of the run, never as a pass.
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any, Callable

from kimi_oracle.core.errors import CandidateError


def run_forked(name: str, func: Callable[..., Any], args: tuple, kwargs: dict[str, Any],
               timeout_s: float) -> tuple[str, Any]:
    """`("result", func(*args, **kwargs))` from a forked process, or `("error", why)` when it
    raised, died or did not answer within `timeout_s` (then killed). A CandidateError raised
    there is raised here (a candidate that cannot load: a harness error)."""
    from kimi_oracle.fuzzers.sandbox import _context, _hidden_main

    ctx = _context()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, func, args, kwargs), daemon=True, name=name)
    try:
        with _hidden_main():
            proc.start()
        child.close()
        if parent.poll(timeout_s):
            try:
                kind, payload = parent.recv()
            except EOFError:
                kind, payload = "died", None
        else:
            kind, payload = "hung", None
    finally:
        parent.close()
        if proc.is_alive():
            proc.kill()
        proc.join(5)
    if kind == "load":
        raise CandidateError(payload)
    if kind == "result":
        return kind, pickle.loads(payload)
    why = {"hung": f"the run did not finish within {timeout_s:g} s (killed)",
           "died": f"the run's process died (exit code {proc.exitcode})"}.get(kind, str(payload))
    return "error", why


def _child(conn: Any, func: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
    try:
        # Pickled here by plain pickle: a tensor travels as its bytes, not as a shared-memory handle
        # (which would die with this process).
        conn.send(("result", pickle.dumps(func(*args, **kwargs), protocol=pickle.HIGHEST_PROTOCOL)))
    except CandidateError as exc:
        conn.send(("load", str(exc)))
    except BaseException:  # noqa: BLE001 — reported, never a pass
        conn.send(("error", "the run failed: " + traceback.format_exc(limit=3).strip().splitlines()[-1]))
    finally:
        conn.close()
