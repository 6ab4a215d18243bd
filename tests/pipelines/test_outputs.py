"""pipelines/outputs.py: large outputs in recycled slabs, never shared between live arrays."""

from __future__ import annotations

import gc
import pickle
import sys
import threading

import numpy as np
import pytest
import torch
from checkpoint_model import spec_preprocess
from images_by_mode import make

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.pipelines import fused, outputs, reference


@pytest.fixture
def small_slabs(monkeypatch):
    # Slabs from 4 KiB, at most 3 of them and 64 KiB together: the limits reached with tiny arrays.
    if not outputs._counts_references():
        pytest.skip("this Python's reference counts do not tell a free slab (the pool is off here)")
    monkeypatch.setattr(outputs, "MIN_BYTES", 4096)
    monkeypatch.setattr(outputs, "MAX_SLABS", 3)
    monkeypatch.setattr(outputs, "MAX_SLAB_BYTES", 32 << 10)
    monkeypatch.setattr(outputs, "MAX_POOLED_BYTES", 64 << 10)
    monkeypatch.setattr(outputs, "_ENABLED", True)
    outputs.release()
    yield
    outputs.release()


def _address(arr) -> int:
    if isinstance(arr, torch.Tensor):
        return arr.data_ptr()
    return arr.__array_interface__["data"][0]


def test_small_arrays_are_plain_and_large_ones_come_back_once_free(small_slabs):
    small = outputs.empty((10, 10), np.float32)
    assert small.shape == (10, 10) and small.dtype == np.float32 and outputs.pooled_bytes() == 0
    first = outputs.empty((32, 64), np.float32)  # 8 KiB
    where = _address(first)
    assert first.shape == (32, 64) and first.flags.c_contiguous and outputs.pooled_bytes() == 8192
    again = outputs.empty((32, 64), np.float32)
    assert _address(again) != where  # the first one is alive: never shared
    del first
    gc.collect()
    third = outputs.empty((2048,), np.float32)  # the same size, now free
    assert _address(third) == where
    assert outputs.pooled_bytes() == 16384


@pytest.mark.parametrize("holder", ["view", "tensor", "reshaped tensor", "tensor's numpy", "memoryview",
                                    "pickle buffer"])
def test_anything_over_a_slab_keeps_it_from_being_handed_out(small_slabs, holder):
    arr = outputs.empty((2048,), np.float32)
    where = _address(arr)
    kept = {
        "view": lambda: arr[5:].reshape(-1),
        "tensor": lambda: torch.from_numpy(arr),
        "reshaped tensor": lambda: torch.from_numpy(arr).reshape(64, 32)[3:],
        "tensor's numpy": lambda: torch.from_numpy(arr).numpy()[1:],
        "memoryview": lambda: memoryview(arr),
        "pickle buffer": lambda: pickle.PickleBuffer(arr),
    }[holder]()
    del arr
    gc.collect()
    for _ in range(3):
        assert _address(outputs.empty((2048,), np.float32)) != where
    del kept
    gc.collect()
    assert _address(outputs.empty((2048,), np.float32)) == where


def test_a_slab_serves_80_to_100_percent_of_its_size_and_the_limits_hold(small_slabs):
    big = outputs.empty((8192,), np.float32)  # 32,768 bytes
    where = _address(big)
    del big
    gc.collect()
    assert _address(outputs.empty((6000,), np.float32)) != where  # 24,000 bytes: under 80 %
    assert _address(outputs.empty((6600,), np.float32)) == where  # 26,400 bytes
    outputs.release()
    kept = [outputs.empty((4096,), np.float32) for _ in range(5)]  # 16 KiB each, all alive
    assert outputs.pooled_bytes() <= 64 << 10 and len(outputs._slabs) <= 3
    assert len({_address(a) for a in kept}) == 5
    too_big = outputs.empty((16384,), np.float32)  # 64 KiB: over the slab limit, never kept
    assert too_big.nbytes == 65536 and all(s.nbytes <= 32 << 10 for s in outputs._slabs)


def test_this_python_counts_references_and_another_does_not(monkeypatch):
    assert outputs._counts_references() == (sys.implementation.name == "cpython")  # CPython with its GIL here
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)  # a free-threaded build
    assert not outputs._counts_references()


def test_disable_gives_up_the_slabs_and_keeps_none(small_slabs):
    outputs.empty((4096,), np.float32)
    assert outputs.pooled_bytes() > 0
    outputs.disable()
    assert outputs.pooled_bytes() == 0
    outputs.empty((4096,), np.float32)
    assert outputs.pooled_bytes() == 0


def test_a_forked_child_starts_with_a_new_lock_and_no_slab(small_slabs):
    outputs.empty((4096,), np.float32)
    old = outputs._lock
    outputs._after_fork()  # (what os.register_at_fork runs in a child)
    assert outputs._lock is not old and isinstance(outputs._lock, type(threading.Lock()))
    assert outputs.pooled_bytes() == 0


def _spec_bytes(img, cfg) -> bytes:
    return spec_preprocess([img], cfg.to_hf_json())[0].tobytes()


def test_reference_outputs_in_reused_slabs_are_the_spec(small_slabs, monkeypatch):
    # One slab holds each image's patches in turn (the previous image's values underneath, the
    # composite by the vector passes for the RGBA one): every value is written again.
    monkeypatch.setattr(fused, "_VECTOR_MIN_PIXELS", 1)
    cfg = PreprocessConfig.k3()
    images = [make("RGB", 42, 28, seed=1), make("RGBA", 40, 26, seed=2), make("RGB", 41, 27, seed=3)]
    where = set()
    for img in images:
        got = reference.preprocess([img], cfg, threads=1).pixel_values
        assert got.numpy().tobytes() == _spec_bytes(img, cfg)
        where.add(_address(got))
        del got
        gc.collect()
    assert len(where) == 1  # (all three in the same slab)


def test_two_live_results_never_share_and_stay_the_spec(small_slabs):
    cfg = PreprocessConfig.k3()
    a, b = make("RGB", 42, 28, seed=4), make("RGB", 42, 28, seed=5)
    first = reference.preprocess([a], cfg, threads=1).pixel_values
    second = reference.preprocess([b], cfg, threads=1).pixel_values
    assert _address(first) != _address(second)
    assert first.numpy().tobytes() == _spec_bytes(a, cfg)
    assert second.numpy().tobytes() == _spec_bytes(b, cfg)


def test_a_batch_on_threads_of_pooled_outputs_is_the_spec(small_slabs):
    cfg = PreprocessConfig.k3()
    images = [make("RGB", 42, 28, seed=6), make("RGBA", 42, 28, seed=7), make("P", 42, 28, seed=8)]
    for _ in range(2):  # the second time through slabs the first one freed
        got = reference.preprocess(images, cfg, threads=3)
        want, _ = spec_preprocess(images, cfg.to_hf_json())
        assert got.pixel_values.numpy().tobytes() == want.tobytes()
        del got
        gc.collect()
