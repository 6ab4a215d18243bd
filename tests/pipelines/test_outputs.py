"""pipelines/outputs.py: large outputs in recycled slabs, never shared between live arrays."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from checkpoint_model import spec_preprocess
from images_by_mode import make

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.pipelines import outputs, reference


@pytest.fixture
def small_slabs(monkeypatch):
    # Slabs from 4 KiB, at most 3 of them and 64 KiB together: the limits reached with tiny arrays.
    monkeypatch.setattr(outputs, "MIN_BYTES", 4096)
    monkeypatch.setattr(outputs, "MAX_SLABS", 3)
    monkeypatch.setattr(outputs, "MAX_SLAB_BYTES", 32 << 10)
    monkeypatch.setattr(outputs, "MAX_POOLED_BYTES", 64 << 10)
    monkeypatch.setattr(outputs, "_ENABLED", True)
    outputs.release()
    yield
    outputs.release()


def _address(arr: np.ndarray) -> int:
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


@pytest.mark.parametrize("holder", ["view", "tensor", "reshaped tensor", "memoryview"])
def test_anything_over_a_slab_keeps_it_from_being_handed_out(small_slabs, holder):
    arr = outputs.empty((2048,), np.float32)
    where = _address(arr)
    if holder == "view":
        kept = arr[5:].reshape(-1)
    elif holder == "tensor":
        kept = torch.from_numpy(arr)
    elif holder == "reshaped tensor":
        kept = torch.from_numpy(arr).reshape(64, 32)[3:]
    else:
        kept = memoryview(arr)
    del arr
    gc.collect()
    for _ in range(3):
        assert _address(outputs.empty((2048,), np.float32)) != where
    del kept
    gc.collect()
    assert _address(outputs.empty((2048,), np.float32)) == where


def test_a_slab_serves_sizes_between_half_and_all_of_it_and_the_limits_hold(small_slabs):
    big = outputs.empty((8192,), np.float32)  # 32 KiB
    where = _address(big)
    del big
    gc.collect()
    assert _address(outputs.empty((4000,), np.float32)) != where  # 16,000 bytes: under half of it
    assert _address(outputs.empty((5000,), np.float32)) == where  # 20 KiB
    outputs.release()
    kept = [outputs.empty((4096,), np.float32) for _ in range(5)]  # 16 KiB each, all alive
    assert outputs.pooled_bytes() <= 64 << 10 and len(outputs._slabs) <= 3
    assert len({_address(a) for a in kept}) == 5
    too_big = outputs.empty((16384,), np.float32)  # 64 KiB: over the slab limit, never kept
    assert too_big.nbytes == 65536 and all(s.nbytes <= 32 << 10 for s in outputs._slabs)


def test_without_reference_counts_every_array_is_fresh(small_slabs, monkeypatch):
    monkeypatch.setattr(outputs, "_ENABLED", False)
    outputs.empty((4096,), np.float32)
    assert outputs.pooled_bytes() == 0


def test_reference_outputs_in_reused_slabs_are_the_spec(small_slabs):
    # The same slab holds one image's patches after another's (stale values underneath): every
    # value is written again.
    cfg = PreprocessConfig.k3()
    images = [make("RGB", 42, 28, seed=1), make("RGBA", 40, 26, seed=2), make("RGB", 41, 27, seed=3)]
    for img in images:
        got = reference.preprocess([img], cfg, threads=1).pixel_values
        want, _ = spec_preprocess([img], cfg.to_hf_json())
        assert got.numpy().tobytes() == want.tobytes()
        del got
        gc.collect()
    assert outputs.pooled_bytes() > 0
