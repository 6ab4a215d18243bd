"""Candidates for tests/cli/test_gate_golden_nightly.py, driven by files (events), never by time.

`KIMI_TEST_EVENTS` names a directory. `blocking` writes `called` there on its first call; once
the test has created `block` there, its next call writes `blocked-<pid>` and never returns, so
the test interrupts the command exactly while a candidate call is in flight.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from kimi_oracle.pipelines import reference

EVENTS = "KIMI_TEST_EVENTS"


def blocking(images, config):
    """The reference, until `<events>/block` exists: then it hangs (and says so in a file)."""
    folder = os.environ.get(EVENTS)
    if folder:
        open(os.path.join(folder, "called"), "a").close()
        if os.path.exists(os.path.join(folder, "block")):
            open(os.path.join(folder, f"blocked-{os.getpid()}"), "w").close()
            time.sleep(3600)
    return reference.preprocess(images, config)


def chatty_segfault(images, config):
    """Prints half a MiB on every call, and dies of SIGSEGV on palette images."""
    sys.stdout.write(("chatty candidate output " * 21000 + "\n") * 1)
    sys.stdout.flush()
    if any(img.mode == "P" for img in images):
        os.kill(os.getpid(), signal.SIGSEGV)
    return reference.preprocess(images, config)


def exit_status_by_mode(images, config):
    """Dies with exit status 1 on palette images and with exit status 0 on greyscale ones."""
    if any(img.mode == "P" for img in images):
        os._exit(1)
    if any(img.mode == "L" for img in images):
        os._exit(0)
    return reference.preprocess(images, config)


def gated(images, config):
    """Writes `started` in the folder its first image's info names (`kimi_test_events`), then
    waits for `go` there before returning the reference's result: a test sees the call at work
    while it has not answered yet."""
    folder = images[0].info.get("kimi_test_events")
    if folder:
        open(os.path.join(folder, "started"), "w").close()
        while not os.path.exists(os.path.join(folder, "go")):
            time.sleep(0.005)
    return reference.preprocess(images, config)


def dropping_blocking(images, config):
    """Forgets the last patch row (a finding on every call); while `<events>/block` exists each
    call waits (after writing `blocked-<pid>`), and goes on once the test removes it."""
    folder = os.environ.get(EVENTS)
    if folder:
        open(os.path.join(folder, "called"), "a").close()
        block = os.path.join(folder, "block")
        if os.path.exists(block):
            open(os.path.join(folder, f"blocked-{os.getpid()}"), "w").close()
            while os.path.exists(block):
                time.sleep(0.05)
    out = reference.preprocess(images, config)
    return out.pixel_values[:-1], out.grid_thws
