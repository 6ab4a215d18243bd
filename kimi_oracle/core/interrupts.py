"""Ctrl-C and SIGTERM: recorded, raised as KeyboardInterrupt, and checked again at safe points.

A signal's exception can be swallowed when it lands in code that ignores exceptions (a garbage
collector callback, a `__del__`): Python then prints "Exception ignored" and goes on. So the
handlers also record the signal, and long loops call `raise_if_requested()` at every example:
an interrupt is never lost and a run can never end as if nothing had happened.

Also the process-lifetime calls that need no torch: `die_with_parent` (the kernel ends this
process with its parent), `lead_own_group` and `kill_group` (a process group led, then ended with
SIGKILL); the sandbox's executor re-exports them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Callable, Iterator

from kimi_oracle.core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

_received: list[int] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every command's cleanup and report paths run."""


def _interrupt() -> KeyboardInterrupt:
    return Terminated() if signal.SIGTERM in _received else KeyboardInterrupt()


def _on_signal(signum: int, frame: object) -> None:
    _received.append(signum)
    raise _interrupt()


def install() -> None:
    """Handle SIGINT and SIGTERM as above (main thread only; elsewhere nothing changes)."""
    try:
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)
    except ValueError:  # pragma: no cover - not the main thread (embedded use)
        pass


def requested() -> bool:
    """True once SIGINT or SIGTERM arrived."""
    return bool(_received)


def raise_if_requested() -> None:
    """Raise the pending interrupt again (a safe point in a long loop)."""
    if _received:
        raise _interrupt()


def exit_code() -> int:
    """130 after Ctrl-C, 143 after SIGTERM."""
    return EXIT_TERMINATED if signal.SIGTERM in _received else EXIT_INTERRUPTED


def quiet_thread() -> None:
    """SIGINT and SIGTERM blocked in the calling (helper) thread: the main thread alone receives
    them, so that `held()` there holds them back (an executor's `initializer`)."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        pass


@contextlib.contextmanager
def held() -> Iterator[Callable[[], bool]]:
    """SIGINT and SIGTERM held back while a verdict is decided and its report written; yields a
    function saying whether one is waiting (delivered, and raised, when the block ends)."""
    wanted = {signal.SIGINT, signal.SIGTERM}
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        yield requested
        return
    try:
        yield lambda: requested() or bool(wanted & signal.sigpending())
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, wanted)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent ends (Linux; elsewhere
    nothing). A process whose parent already ended gets `sig` at once."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        parent = os.getppid()
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent or parent == 1:  # the parent ended before the request
            os.kill(os.getpid(), sig)
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        pass


def lead_own_group() -> None:
    """Make this process the leader of a new process group: whatever it forks (and they fork)
    stays in that group unless it leaves on purpose, and `kill_group` ends them all with it."""
    try:
        os.setpgid(0, 0)
    except OSError:  # pragma: no cover - already a group leader
        pass


def kill_group(pid: int | None) -> None:
    """SIGKILL to the process group led by `pid` (an executor that called `lead_own_group`): the
    executor and every descendant still in its group. Nothing when there is none."""
    if not pid:
        return
    try:
        if os.getpgid(pid) != pid:  # (not a leader: an executor that died before it led its group)
            return
    except OSError:  # the leader is gone; its group may live on
        pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
