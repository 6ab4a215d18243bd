"""A crash is one finding per cause (issue 43): keyed by its exception type and message signature,
not by the mode class it was met on; two refusals with different messages stay two."""

from __future__ import annotations

from PIL import Image

from kimi_oracle.oracle.grouping import failure_signature, finding_key
from kimi_oracle.oracle.kinds import CRASH, TIMEOUT


def _stats(text: str) -> dict:
    return {"exception": text}


def test_one_cause_on_every_mode_class_is_one_key():
    rgb, pal = [Image.new("RGB", (3, 3))], [Image.new("P", (3, 3))]
    a = finding_key(CRASH, _stats("ValueError: stack expects equal size, got [1, 3, 28, 28] at entry 0"), rgb)
    b = finding_key(CRASH, _stats("ValueError: stack expects equal size, got [1, 3, 56, 14] at entry 1"), pal)
    assert a == b == "crash(ValueError: stack expects equal size, got N, N, N, N at entry N)"


def test_two_refusals_are_two_keys_and_numbers_do_not_split_one():
    img = [Image.new("RGB", (3, 3))]
    patch16 = finding_key(CRASH, _stats("ValueError: Unsupported Kimi vision patch size 16; expected 14."), img)
    patch28 = finding_key(CRASH, _stats("ValueError: Unsupported Kimi vision patch size 28; expected 14."), img)
    merge1 = finding_key(CRASH, _stats("ValueError: Unsupported Kimi merge kernel (1, 1); expected (2, 2)."), img)
    assert patch16 == patch28 == "crash(ValueError: Unsupported Kimi vision patch size N; expected N.)"
    assert merge1 == "crash(ValueError: Unsupported Kimi merge kernel N, N; expected N, N.)" != patch16


def test_signature_is_cut_at_a_word_and_timeouts_keep_their_mode_class():
    long = "RuntimeError: " + "word " * 40
    sig = failure_signature(_stats(long))
    assert sig.startswith("RuntimeError: word word") and sig.endswith(" ...") and len(sig) < 100
    assert failure_signature(_stats("")) == "unknown"
    assert finding_key(TIMEOUT, _stats("CallTimedOut: no answer"), [Image.new("P", (2, 2))]) == "timeout[P](CallTimedOut)"


def test_addresses_do_not_split_a_cause_and_a_crash_key_names_no_mode_class():
    from kimi_oracle.oracle.grouping import key_mode_class

    a = failure_signature(_stats("RuntimeError: bad object at 0x7f12ab34cd"))
    b = failure_signature(_stats("RuntimeError: bad object at 0x55d0e1"))
    assert a == b == "RuntimeError: bad object at ADDR"
    assert key_mode_class("crash(ProcessDied[SIGSEGV]: x)") == "" and key_mode_class("timeout[P](CallTimedOut)") == "P"
