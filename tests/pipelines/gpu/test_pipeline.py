"""The Triton pipeline against the CPU reference: torch.equal for every mode, stage and pattern."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from gpu_testlib import DEVICE, PATTERNS, assert_same, full_range, gen, k3, k25, rgba_hidden
from gpu_testlib import zoo as _zoo
from PIL import Image

from kimi_oracle.core.errors import BackendError, InputError
from kimi_oracle.pipelines import reference
from kimi_oracle.pipelines.gpu import preprocess


def _zoo_3band() -> list[tuple[str, Image.Image]]:
    return [
        ("LAB", gen(41, 37, "LAB", seed=30)),
        ("YCbCr", gen(37, 41, "YCbCr", seed=31)),
        ("HSV", full_range(44, 30, "HSV", seed=32)),
    ]


LIMIT = 2  # patch budget small enough that nearly every zoo image is resampled


def _paths(images, config):
    from kimi_oracle.core.geometry import plan
    from kimi_oracle.pipelines.gpu import resample as rs

    out = set()
    for im in images:
        p = plan(im.width, im.height, config)
        if im.mode in ("P", "1") and (p.new_w, p.new_h) != im.size:
            out.add("nearest")
        else:
            out.add(rs.pass_order(im.width, im.height, p.new_w, p.new_h))
    return out


def test_zoo_reaches_every_resampling_path():
    images = [im for _, im in _zoo()]
    paths = _paths(images, k3(LIMIT))
    assert {("h", "v"), ("v", "h"), ("h",), ("v",), (), "nearest"} <= paths, paths


def _check(images, config, gpu_kwargs, label):
    exp = reference.preprocess(images, config)
    got = preprocess(images, config, **gpu_kwargs)
    assert got.pixel_values.dtype == torch.float32
    assert_same(got, exp, label)
    return got, exp


# Both stages with a chessboard (two levels, parity) by default; the uniform patterns only change
# the composite table's level, which test_composite_is_exhaustive covers for every (alpha, level)
# pair, so they run with -m slow (as the tile-crossing tests run every storage kind).
_DEFAULT_RUN = {("after_resize", "chessboard"), ("before_resize", "chessboard")}


@pytest.mark.parametrize("stage, pattern", [
    pytest.param(stage, pattern, marks=() if (stage, pattern) in _DEFAULT_RUN else pytest.mark.slow)
    for stage in ("after_resize", "before_resize") for pattern in PATTERNS
])
def test_every_mode_matches_reference(stage, pattern, gpu_kwargs):
    labels, images = zip(*_zoo())
    cfg = k3(LIMIT, pattern=pattern, stage=stage)
    _check(list(images), cfg, gpu_kwargs, f"{stage}/{pattern}")


def test_k25_matches_reference(gpu_kwargs):
    labels, images = zip(*_zoo())
    _check(list(images), k25(LIMIT), gpu_kwargs, "k25")


def test_three_band_table_modes(gpu_kwargs):
    # 3-band table modes go through 2^24-entry tables that Pillow's own conversion fills (1.5
    # to 3.5 s each here): LAB (resampled with signed a/b in Pillow 13.0, resized-state
    # table) after the resize, YCbCr (source table, convert kernel) before it.
    zoo = dict(_zoo_3band())
    _check([zoo["LAB"]], k3(LIMIT), gpu_kwargs, "LAB after")
    _check([zoo["YCbCr"]], k3(LIMIT, stage="before_resize"), gpu_kwargs, "YCbCr before")
    assert _paths([zoo["LAB"]], k3(LIMIT)) == {("h", "v")}


@pytest.mark.slow
def test_three_band_table_modes_every_stage(gpu_kwargs):
    labels, images = zip(*_zoo_3band())
    _check(list(images), k3(LIMIT), gpu_kwargs, "3-band after")
    _check(list(images), k3(LIMIT, stage="before_resize"), gpu_kwargs, "3-band before")


def test_composite_is_exhaustive(gpu_kwargs):
    # Every (alpha, level) pair, at both chessboard parities (square 1: neighbours alternate),
    # without resampling: the tail's composite table against the reference's float formula.
    a, c = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    c2 = np.repeat(c, 2, axis=1)
    a2 = np.repeat(a, 2, axis=1)
    rgba = np.stack([c2, 255 - c2, (c2 * 7) % 256, a2], -1).astype(np.uint8)
    img = Image.fromarray(rgba, "RGBA")
    for pattern, extra in [("chessboard", {"chessboard_square_size": 1}), ("gray", {})]:
        cfg = k3(1 << 20, pattern=pattern, **extra)
        _check([img], cfg, gpu_kwargs, f"exhaustive {pattern}")


def test_composite_table_equals_reference_formula():
    from kimi_oracle.core.config import TransparentBgConfig
    from kimi_oracle.pipelines.gpu.tables import composite_table

    a, c = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    rgba = np.stack([c, c, c, a], -1).astype(np.uint8)
    for b in range(256):
        bg = TransparentBgConfig("chessboard", 1, True, b, b)
        assert np.array_equal(composite_table(b), reference.composite(rgba, bg)[..., 0]), b


def test_pass_order_boundary_and_extreme_shapes(gpu_kwargs):
    from kimi_oracle.core.geometry import plan
    from kimi_oracle.pipelines.gpu import resample as rs

    cfg = k3(16)
    sizes = [(300, 2), (2, 300), (1500, 3), (3, 1500), (1, 1), (1, 90), (90, 1)]
    # sizes whose plan lands on (H - h) = 2 (W - w) or next to it
    found = []
    for w in range(40, 90):
        for h in range(40, 200):
            p = plan(w, h, cfg)
            d = (h - p.new_h) - 2 * (w - p.new_w)
            if d in (-1, 0, 1) and p.new_w != w and len(found) < 6:
                found.append((w, h))
    assert found, "no boundary sizes found"
    orders = {rs.pass_order(w, h, plan(w, h, cfg).new_w, plan(w, h, cfg).new_h) for w, h in found}
    assert ("h", "v") in orders or ("v", "h") in orders
    images = [gen(w, h, "RGB", seed=i) for i, (w, h) in enumerate(sizes + found)]
    images += [rgba_hidden(w, h, seed=i) for i, (w, h) in enumerate(sizes[:4])]
    got, _ = _check(images, cfg, gpu_kwargs, "shapes")
    assert got.grid_thws[4].tolist() == [1, 2, 2]  # 1x1 -> padded to 28x28


def test_batch_equals_one_by_one_and_chunks(gpu_kwargs, monkeypatch):
    labels, images = zip(*_zoo()[:10])
    images = list(images)
    cfg = k3(LIMIT)
    whole = preprocess(images, cfg, **gpu_kwargs)
    singles = [preprocess([im], cfg, **gpu_kwargs) for im in images[:4]]
    for i, one in enumerate(singles):
        assert torch.equal(whole.image(i).pixel_values, one.pixel_values), i
        assert torch.equal(whole.image(i).grid_thws, one.grid_thws), i
    from kimi_oracle.pipelines.gpu import pipeline

    calls = []
    real = pipeline._run_chunk
    monkeypatch.setattr(pipeline, "_run_chunk", lambda batch, jobs: (calls.append(len(jobs)), real(batch, jobs))[1])
    chunked = preprocess(images, cfg, chunk_bytes=20_000, **gpu_kwargs)
    assert len(calls) > 2 and sum(calls) == len(images), calls
    assert_same(chunked, whole, "chunked")


def test_bf16_output_rounds_like_torch(gpu_kwargs):
    labels, images = zip(*_zoo()[:6])
    cfg = k3(LIMIT)
    exp = reference.preprocess(list(images), cfg)
    got = preprocess(list(images), cfg, out_dtype=torch.bfloat16, **gpu_kwargs)
    assert got.pixel_values.dtype == torch.bfloat16
    # documented rounding: round-to-nearest-even of the float32 value (torch's .to())
    assert torch.equal(got.pixel_values.cpu(), exp.pixel_values.to(torch.bfloat16))


def test_grids_come_from_produced_shapes(gpu_kwargs):
    cfg = k3(16)
    images = [gen(47, 31, "RGB"), gen(31, 47, "RGB"), gen(1, 1, "RGB")]
    got, exp = _check(images, cfg, gpu_kwargs, "grids")
    assert got.grid_thws.dtype == torch.int64
    assert int((got.grid_thws.prod(dim=1)).sum()) == got.pixel_values.shape[0]


class _FaultyTail:
    """Stands in for `kernels.tail_kernel`: the launch of image slot `slot` gets a metadata row
    changed by `fault(row)` (the real kernel then writes what that row bounds)."""

    def __init__(self, real, slot, fault):
        self.real, self.slot, self.fault, self.calls = real, slot, fault, 0

    def __getitem__(self, grid):
        def launch(src, out, meta, *args, **kwargs):
            self.calls += 1
            meta = meta.clone()
            self.fault(meta[self.slot])
            return self.real[grid](src, out, meta, *args, **kwargs)

        return launch


def _plant(monkeypatch, slot, fault) -> _FaultyTail:
    from kimi_oracle.pipelines.gpu import kernels

    faulty = _FaultyTail(kernels.tail_kernel, slot, fault)
    monkeypatch.setattr(kernels, "tail_kernel", faulty)
    return faulty


def test_grid_follows_a_tail_that_writes_one_patch_row_fewer(gpu_kwargs, monkeypatch):
    # The plan says image 1 is a 3 x 2 grid; the planted fault makes the tail write its first
    # 2 patch rows only. The grid must come from that write (2 x 2), and disagreeing with the
    # plan it is an error that names both.
    from kimi_oracle.core.geometry import plan
    from kimi_oracle.pipelines.gpu import layout

    cfg = k3(16)
    images = [gen(47, 31, "RGB", seed=1), gen(31, 47, "RGB", seed=2)]
    g = plan(31, 47, cfg).grid_thw
    assert g[1] >= 2, g

    def one_row_fewer(row):
        row[int(layout.ROW_ELEMS)] -= int(row[int(layout.ROW_GRID_W)]) * cfg.patch_size ** 2

    faulty = _plant(monkeypatch, 1, one_row_fewer)
    with pytest.raises(BackendError) as err:
        preprocess(images, cfg, **gpu_kwargs)
    assert faulty.calls == 1
    msg = str(err.value)
    assert msg.startswith("image 1: "), msg
    assert f"produced grid {[1, g[1] - 1, g[2]]}" in msg, msg
    assert f"plan says {list(g)}" in msg, msg


def test_image_size_follows_a_tail_that_fills_one_row_fewer(gpu_kwargs, monkeypatch):
    # Same patch grid, one image row fewer filled from the source (padding instead): the
    # recorded extent (not the plan) is what is checked.
    from kimi_oracle.core.geometry import plan
    from kimi_oracle.pipelines.gpu import layout

    cfg = k3(16)
    p = plan(31, 47, cfg)
    assert p.new_h % 14 != 1, p  # one row fewer keeps the same patch grid

    def one_image_row_fewer(row):
        row[int(layout.ROW_H)] -= 1

    _plant(monkeypatch, 0, one_image_row_fewer)
    with pytest.raises(BackendError, match=rf"produced a {p.new_w}x{p.new_h - 1} image, "
                                           rf"geometry.plan says {p.new_w}x{p.new_h}"):
        preprocess([gen(31, 47, "RGB", seed=2)], cfg, **gpu_kwargs)


def test_produced_grids_are_built_from_the_records():
    # The host side alone: grids come from the recorded extents, per owning image, and every
    # inconsistency is a BackendError.
    from kimi_oracle.pipelines.gpu import layout, pipeline

    def job(i, grid, w, h):
        return pipeline._Job(i, np.zeros((1, 1, 3), np.uint8), int(layout.U8), 3, w, h, w, h, False,
                             "none", (), pipeline._RGB, False, plan_grid=grid)

    jobs = [job(0, (1, 2, 2), 28, 20), job(1, (1, 1, 2), 20, 14)]
    # image 0 split over two programs (one patch row each), image 1 in one
    rec = [[2 * 196, 1, 2, 14, 28], [2 * 196, 2, 2, 20, 28], [2 * 196, 1, 2, 14, 20]]
    ext = pipeline._Extent(torch.tensor(rec, dtype=torch.int32), np.array([0, 0, 1]))
    assert pipeline._produced_grids(jobs, [ext], 6, 14) == [(1, 2, 2), (1, 1, 2)]
    with pytest.raises(BackendError, match="pixel_values has 7"):
        pipeline._produced_grids(jobs, [ext], 7, 14)
    short = pipeline._Extent(torch.tensor(rec[:2] + [[196, 1, 1, 14, 14]], dtype=torch.int32),
                             np.array([0, 0, 1]))
    with pytest.raises(BackendError, match=r"image 1: the kernels produced grid \[1, 1, 1\]"):
        pipeline._produced_grids(jobs, [short], 5, 14)
    partial = pipeline._Extent(torch.tensor(rec[:2] + [[2 * 196 - 1, 1, 2, 14, 20]], dtype=torch.int32),
                               np.array([0, 0, 1]))
    with pytest.raises(BackendError, match="not a full 1x2 grid"):
        pipeline._produced_grids(jobs, [partial], 6, 14)


def test_prepare_launches_then_finish(gpu_kwargs):
    from kimi_oracle.pipelines.gpu.pipeline import prepare_launches

    cfg = k3(LIMIT)
    images = [gen(47, 31, "RGB", seed=1), rgba_hidden(16, 70, seed=40)]
    launches, stats, finish = prepare_launches(images, cfg, **gpu_kwargs)
    assert stats["launches"] == len(launches)
    for _ in range(2):  # idempotent: the records are overwritten, not accumulated
        for fn in launches:
            fn()
    assert_same(finish(), reference.preprocess(images, cfg), "prepare_launches")


def test_prepare_launches_through_a_chunk_buffer(gpu_kwargs, monkeypatch):
    # On CUDA the tails wrote a chunk buffer whenever the output's device read `cuda:0` and the
    # launches' `cuda` (unequal torch.devices), and `finish` never copied that buffer into the
    # output: every value the device benchmarks read back differed from the reference (H200,
    # 2026-12-04). Forced here on CPU tensors: `finish` must copy it.
    from kimi_oracle.pipelines.gpu import launches as launches_mod
    from kimi_oracle.pipelines.gpu.pipeline import prepare_launches

    monkeypatch.setattr(launches_mod, "_writes_in_place", lambda out, dev: False)
    cfg = k3(LIMIT)
    images = [gen(47, 31, "RGB", seed=3), rgba_hidden(16, 70, seed=41)]
    launches, _, finish = prepare_launches(images, cfg, **gpu_kwargs)
    for fn in launches:
        fn()
    assert_same(finish(), reference.preprocess(images, cfg), "prepare_launches via a chunk buffer")


def test_writes_in_place_reads_an_indexless_cuda_device_as_the_current_one(monkeypatch):
    from types import SimpleNamespace

    from kimi_oracle.pipelines.gpu.launches import _writes_in_place

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    on = lambda dev: SimpleNamespace(device=torch.device(dev))  # noqa: E731 - a tensor's device only
    assert _writes_in_place(on("cuda:1"), torch.device("cuda"))
    assert _writes_in_place(on("cuda:1"), torch.device("cuda:1"))
    assert not _writes_in_place(on("cuda:0"), torch.device("cuda"))
    assert _writes_in_place(on("cuda"), torch.device("cuda"))
    assert not _writes_in_place(on("cuda:0"), torch.device("cuda:1"))
    assert not _writes_in_place(on("cpu"), torch.device("cuda"))  # a pinned host output
    assert _writes_in_place(on("cpu"), torch.device("cpu"))


def test_resolve_device_names_the_current_cuda_device_by_its_index(monkeypatch):
    # (no CUDA here: torch's answers are stood in for; the kernels are the interpreter's, loaded)
    from kimi_oracle.pipelines.gpu import backend

    backend._kernels()  # loaded under the interpreter first (never compiled for CUDA here)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    assert backend.resolve_device("cuda") == torch.device("cuda", 2)
    assert backend.resolve_device(None) == torch.device("cuda", 2)
    assert backend.resolve_device("cuda:1") == torch.device("cuda", 1)


def test_solid_image_and_transpose(gpu_kwargs):
    cfg = k3(1 << 20)
    a = Image.new("RGB", (56, 28), (10, 200, 30))
    got = preprocess([a, a.transpose(Image.Transpose.TRANSPOSE)], cfg, **gpu_kwargs)
    assert got.grid_thws.tolist() == [[1, 2, 4], [1, 4, 2]]
    assert torch.equal(got.image(0).pixel_values, got.image(1).pixel_values)


def test_unsupported_mode_is_an_input_error(gpu_kwargs):
    img = Image.new("RGBa", (4, 4))
    with pytest.raises(InputError, match="not supported by the GPU pipeline"):
        preprocess([img], k3(), **gpu_kwargs)


def test_bad_out_dtype(gpu_kwargs):
    with pytest.raises(InputError, match="out_dtype"):
        preprocess([gen(4, 4, "RGB")], k3(), out_dtype=torch.float16, **gpu_kwargs)


def test_no_backend_is_a_clear_error():
    # A fresh interpreter without TRITON_INTERPRET and without CUDA: importing works, calling
    # raises BackendError.
    code = (
        "import torch, sys\n"
        "import kimi_oracle.pipelines.gpu as g\n"
        "from kimi_oracle.core.config import PreprocessConfig\n"
        "from kimi_oracle.core.errors import BackendError\n"
        "from PIL import Image\n"
        "if torch.cuda.is_available(): sys.exit(0)\n"
        "try:\n"
        "    g.preprocess([Image.new('RGB', (4, 4))], PreprocessConfig.k3())\n"
        "except BackendError as e:\n"
        "    print('BackendError:', e); sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    if "BackendError" in r.stdout:
        assert "TRITON_INTERPRET" in r.stdout


def _doubled(value: int) -> int:
    import triton
    import triton.language as tl

    @triton.jit
    def double(x_ptr, out_ptr):
        x = tl.load(x_ptr)
        tl.store(out_ptr, x + x)

    x = torch.tensor([value], dtype=torch.int32)
    out = torch.zeros(1, dtype=torch.int32)
    double[(1,)](x, out)
    return int(out[0])


@pytest.mark.skipif(DEVICE != "cpu", reason="the interpreter's options (compiled kernels have their own)")
def test_the_interpreters_discarded_overflow_checks_are_skipped(monkeypatch):
    import triton.runtime.interpreter as interp

    from kimi_oracle.pipelines.gpu import backend

    preprocess([gen(3, 2, "RGB")], k3(), device="cpu")  # (loads the kernels: the options are set then)
    options = interp.interpreter_builder.options
    assert options.sanitize_overflow is False and options.debug is False
    # What was skipped did nothing: with Triton's own default (checks on, debug off) an int32 add
    # that overflows is not reported either; it wraps, as on the device.
    monkeypatch.setattr(interp.interpreter_builder, "options", dataclasses.replace(options, sanitize_overflow=True))
    assert _doubled(2**30 + 1) == 2 * (2**30 + 1) - 2**32
    assert _doubled(1000) == 2000
    # With debug on the checks act, and the backend leaves them on.
    debug = dataclasses.replace(options, sanitize_overflow=True, debug=True)
    monkeypatch.setattr(interp.interpreter_builder, "options", debug)
    with pytest.raises(Exception, match="int32 overflow detected"):  # (triton.runtime.errors.InterpreterError)
        _doubled(2**30 + 1)
    assert backend._skip_discarded_overflow_checks() is False and interp.interpreter_builder.options is debug
