"""The GPU pipeline's public calls: preprocess, prepare_launches and launch_plan over chunks.

Per image the host decides a short recipe (`jobs`), uploads a chunk's images into arenas
(`arenas`) and makes one launch per kernel specialization and stage (`launches`); the grids
returned are read back from what the tails wrote (`grids`). Tile sizes live in `tiles`, the
Triton import and the device in `backend`. Every name this module had stays importable here.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.images import ImageSource, load_images
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.pipelines.gpu import resample as rs
from kimi_oracle.pipelines.gpu.arenas import (_DEVICE_CACHE, _CoefBank, _DeviceCache, _device_tables,
                                              _layout_arenas, _Tables, _tensor, _upload_arenas)
from kimi_oracle.pipelines.gpu.backend import _kernels, resolve_device
from kimi_oracle.pipelines.gpu.grids import _produced_grids
from kimi_oracle.pipelines.gpu.jobs import (_ITEM, _RGB, _TORCH_DT, SUPPORTED_MODES, _check_offsets, _conversion,
                                            _Conversion, _Job, _make_job, _native_array)
from kimi_oracle.pipelines.gpu.launches import (Launch, _Batch, _chunk_launches, _ChunkLaunches, _convert_launches,
                                                _Extent, _fill_fields, _group, _pass_launches, _pass_rows,
                                                _tail_launches, _tail_rows, _writes_in_place)
from kimi_oracle.pipelines.gpu.tables import (
    MODES_16,
    TABLE_MODES,
    background_params,
    composite_table,
    conversion_table,
    fill_uses_alpha,
    i16_dtype,
    i32_key_level,
    table_channels,
    table_key,
)
from kimi_oracle.pipelines.gpu.tiles import (CUDA_TILES, INTERPRETER_TILES, Tiles, _flat_tiles, _grid_tiles,
                                             drawn_tiles)
from kimi_oracle.pipelines.reference import normalization_lut


def _job_bytes(job: _Job, factor: int, out_item: int) -> int:
    """Device bytes one image needs (source, filled RGB, intermediate, output)."""
    n = job.src.nbytes
    if job.filled_first:
        n += job.src_h * job.src_w * 3
    if job.passes:
        mh, mw = job.mid_shape
        n += mh * mw * job.pass_nch * _ITEM[job.pass_dt]
    hp, wp = -(-job.out_h // factor) * factor, -(-job.out_w // factor) * factor
    return n + hp * wp * 3 * out_item


def _split_chunks(batch: _Batch, chunk_bytes: int | None) -> list[list[_Job]]:
    """Consecutive images whose device bytes add up to at most `chunk_bytes` (at least one)."""
    if not chunk_bytes:
        return [batch.jobs]
    factor = int(batch.config.factor)
    chunks: list[list[_Job]] = []
    cur: list[_Job] = []
    used = 0
    for job in batch.jobs:
        nbytes = _job_bytes(job, factor, batch.out.element_size())
        if cur and used + nbytes > chunk_bytes:
            chunks.append(cur)
            cur, used = [], 0
        cur.append(job)
        used += nbytes
    if cur:
        chunks.append(cur)
    return chunks


def _check_out_dtype(out_dtype: torch.dtype) -> None:
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise InputError(f"out_dtype must be torch.float32 or torch.bfloat16, got {out_dtype}")


def _output(jobs: Sequence[_Job], config: PreprocessConfig, out_dtype: torch.dtype,
            dev: torch.device, pin: bool) -> tuple[torch.Tensor, np.ndarray]:
    """The output tensor, sized by the plan's grids, and each image's first patch row."""
    # The plan sizes the output and the tail's launch; the returned grids are read back from
    # what the tail wrote (`_produced_grids`) and checked against these.
    npatch = [j.plan_grid[1] * j.plan_grid[2] for j in jobs]
    starts = np.concatenate([[0], np.cumsum(npatch)]).astype(np.int64)
    ps = config.patch_size
    out = torch.empty((int(starts[-1]), 3, ps, ps), dtype=out_dtype, device=dev, pin_memory=pin)
    return out, starts


def _lut(config: PreprocessConfig, out_dtype: torch.dtype, dev: torch.device) -> torch.Tensor:
    """The reference's normalization table, (3 x 256) flat, in the output dtype, on `dev`."""
    lut = normalization_lut(config)
    return _DEVICE_CACHE.get(
        ("lut", lut.tobytes(), str(out_dtype), str(dev)),
        lambda: torch.from_numpy(np.array(lut, dtype=np.float32)).to(dev).to(out_dtype).contiguous(),
    )


def _batch(images: Iterable[ImageSource], config: PreprocessConfig, dev: torch.device,
           out_dtype: torch.dtype, out_device: str | torch.device | None, tiles: Tiles | None,
           compiled: bool, plans: Sequence[ResizePlan | None] | None = None) -> _Batch:
    """Decode, plan every image (or take `plans[i]` where given), allocate the output:
    everything before the chunks."""
    _check_out_dtype(out_dtype)
    if tiles is None:
        tiles = CUDA_TILES if compiled else INTERPRETER_TILES
    tiles = tiles.checked()
    decoded = load_images(images)
    given = list(plans) if plans is not None else [None] * len(decoded)
    if len(given) != len(decoded):
        raise ValueError(f"{len(given)} plans for {len(decoded)} images")
    jobs = [_make_job(i, img, config, p) for i, (img, p) in enumerate(zip(decoded, given))]
    odev = dev if out_device is None else torch.device(out_device)
    out, starts = _output(jobs, config, out_dtype, odev, pin=odev.type == "cpu" and dev.type == "cuda")
    return _Batch(_kernels(), dev, config, jobs, out, starts, _lut(config, out_dtype, dev), tiles,
                  compiled)


def prepare_launches(
    images: Iterable[ImageSource],
    config: PreprocessConfig,
    *,
    device: str | torch.device | None = None,
    out_dtype: torch.dtype = torch.float32,
    tiles: Tiles | None = None,
) -> tuple[list[Launch], dict, Callable[[], PreprocessResult]]:
    """Benchmark hook: do all host work and uploads, return (launches, byte counts, finish).

    Calling every launch in order fills the output; launches are idempotent, so they can be
    timed repeatedly from the planes already on the device. `finish()`, after the launches,
    returns the `PreprocessResult` (grids read back from what the tail recorded).
    """
    dev = resolve_device(device)
    batch = _batch(images, config, dev, out_dtype, None, tiles, compiled=dev.type == "cuda")
    chunk = _chunk_launches(batch, batch.jobs)

    def finish() -> PreprocessResult:
        if chunk.copy_out is not None:  # (the launches wrote a chunk buffer: into the output)
            chunk.copy_out()
        produced = _produced_grids(batch.jobs, chunk.extents, int(batch.out.shape[0]), config.patch_size)
        return PreprocessResult(batch.out, torch.tensor(produced, dtype=torch.int64))

    return chunk.launches, _stats(batch.jobs, chunk.launches), finish


def launch_plan(
    images: Iterable[ImageSource],
    config: PreprocessConfig,
    *,
    out_dtype: torch.dtype = torch.float32,
    tiles: Tiles = CUDA_TILES,
) -> tuple[list[Launch], dict]:
    """The launches a CUDA run makes for this batch (CUDA options, `tiles`), built on CPU
    tensors and not run: for the ahead-of-time build and the roofline. Needs no GPU."""
    rs.check_pillow()
    batch = _batch(images, config, torch.device("cpu"), out_dtype, None, tiles, compiled=True)
    launches = _chunk_launches(batch, batch.jobs).launches
    return launches, _stats(batch.jobs, launches)


def _stats(jobs: Sequence[_Job], launches: Sequence[Launch]) -> dict:
    return {
        "upload_bytes": sum(int(j.src.nbytes) for j in jobs),
        "source_bytes": sum(int(j.src.nbytes) for j in jobs),
        "output_bytes": sum(launch.write_bytes for launch in launches
                            if launch.kernel_name == "tail_kernel"),
        "launches": len(launches),
        "launch_bytes": [launch.describe() for launch in launches],
        "moved_bytes": sum(launch.read_bytes + launch.write_bytes for launch in launches),
    }


def preprocess(
    images: Iterable[ImageSource],
    config: PreprocessConfig,
    *,
    device: str | torch.device | None = None,
    chunk_bytes: int | None = None,
    out_device: str | torch.device | None = None,
    out_dtype: torch.dtype = torch.float32,
    tiles: Tiles | None = None,
    plans: Sequence[ResizePlan | None] | None = None,
) -> PreprocessResult:
    """The checkpoint's preprocessing with Pillow-exact kernels: same bytes as the reference.

    `tiles`: tile sizes and warps (default `CUDA_TILES` on CUDA, `INTERPRETER_TILES` under
    the interpreter); `chunk_bytes`: device bytes per chunk of images (default: one chunk);
    `plans`: a plan per image that replaces its own (None entries: planned as usual).
    """
    dev = resolve_device(device)
    batch = _batch(images, config, dev, out_dtype, out_device, tiles, compiled=dev.type == "cuda", plans=plans)
    extents: list[_Extent] = []
    for jobs in _split_chunks(batch, chunk_bytes):
        extents += _run_chunk(batch, jobs)
    # One read of the tails' records (it also waits for the kernels, and for the copies to a
    # pinned host output, which were queued before it on the same stream).
    produced = _produced_grids(batch.jobs, extents, int(batch.out.shape[0]), config.patch_size)
    if not _writes_in_place(batch.out, dev):
        torch.cuda.current_stream(dev).synchronize()  # pinned host output: wait for the copies
    return PreprocessResult(batch.out, torch.tensor(produced, dtype=torch.int64))


def _run_chunk(batch: _Batch, jobs: Sequence[_Job]) -> list[_Extent]:
    chunk = _chunk_launches(batch, jobs)
    for launch in chunk.launches:
        launch()
    if chunk.copy_out is not None:
        chunk.copy_out()
    return chunk.extents
