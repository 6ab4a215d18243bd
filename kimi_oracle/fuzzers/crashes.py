"""The sandbox's failures: stand-in exception types, crashes rebuilt from an executor's fields, signal names."""

from __future__ import annotations

import signal
from typing import Any

from kimi_oracle.oracle.candidates import CandidateCrash
from kimi_oracle.oracle.checks import CRASH, TIMEOUT


class ProcessDied(Exception):
    """Stand-in exception type for an executor that died: its name is what reports show."""


class CallTimedOut(Exception):
    """Stand-in exception type for an executor that did not answer in time."""


class _RemoteCrash(CandidateCrash):
    """A CandidateCrash rebuilt from fields sent by the executor (or made up by the parent)."""

    check = CRASH

    def __init__(self, spec: str, exc_type: str, message: str, tb: str, **details: Any):
        Exception.__init__(self, f"candidate {spec!r} raised {exc_type}: {message}")
        self.spec = spec
        self.exc_type = exc_type
        self.exc_message = message
        self.traceback = tb
        self.details = details


class CandidateRaised(_RemoteCrash):
    """The candidate raised a Python exception inside the executor."""


class CandidateDied(_RemoteCrash):
    """The executor process died during the call (signal, abort, exit, OOM kill)."""


class CandidateTimeout(_RemoteCrash):
    """The executor did not answer within the per-call timeout and was killed."""

    check = TIMEOUT


def signal_name(returncode: int | None) -> str:
    """`SIGABRT` for -6, `exit status 3` for 3, `unknown` for None."""
    if returncode is None:
        return "unknown"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"
