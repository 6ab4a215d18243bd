"""Candidates that misbehave on palette ("P") images and are correct otherwise, so every run both
passes examples and meets the misbehaviour. Used by tests (never by users)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from kimi_oracle.pipelines import reference


def _palette(images) -> bool:
    return any(img.mode == "P" for img in images)


def _wrap(misbehave):
    def candidate(images, config):
        if _palette(images):
            misbehave()
        return reference.preprocess(images, config)

    candidate.__name__ = misbehave.__name__
    return candidate


class Custom(BaseException):
    """Not an Exception: escapes `except Exception`."""


def _exit0():
    sys.exit(0)


def _os_exit0():
    os._exit(0)


def _segfault():
    os.kill(os.getpid(), signal.SIGSEGV)


def _abort():
    os.abort()


def _hang():
    time.sleep(3600)


def _hog():
    hog = bytearray(1 << 34)  # 16 GiB: more than the --memory-limit the tests give
    hog[0] = 1


def _markup():
    raise RuntimeError("[/x] [enforce fail at alloc_cpu.cpp:72] \udcff")


def _base_exception():
    raise Custom("a BaseException subclass")


def _thread_left_running():
    threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
    raise RuntimeError("left a thread running")


exit0 = _wrap(_exit0)
os_exit0 = _wrap(_os_exit0)
segfault = _wrap(_segfault)
abort = _wrap(_abort)
hang = _wrap(_hang)
hog = _wrap(_hog)
markup = _wrap(_markup)
base_exception = _wrap(_base_exception)
thread_left_running = _wrap(_thread_left_running)
