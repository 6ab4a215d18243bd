"""Host-side planning: each image's recipe (conversion, resample passes, sizes) as a job.

Per image the host decides a short recipe (spec §3): optional fill at the source size
(`convert_kernel`, fill before resize), at most one bicubic pass (`resample_pass_kernel`),
then the fused tail (second pass or NEAREST gather, conversion, composite, pad, LUT,
patchify).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.images import resample_kind
from kimi_oracle.pipelines.gpu import layout as L
from kimi_oracle.pipelines.gpu import resample as rs
from kimi_oracle.pipelines.gpu.tables import (MODES_16, TABLE_MODES, conversion_table, fill_uses_alpha,
                                              i16_dtype, table_key)

_TORCH_DT = {int(L.U8): torch.uint8, int(L.U16): torch.uint16, int(L.I32): torch.int32,
             int(L.F32): torch.float32}
_ITEM = {int(L.U8): 1, int(L.U16): 2, int(L.I32): 4, int(L.F32): 4}

SUPPORTED_MODES = TABLE_MODES | frozenset(("RGB", "RGBA", "RGBX", "CMYK", "I", "F"))


@dataclasses.dataclass(frozen=True)
class _Conversion:
    """How the fill turns an image's own channels into RGBA (kernels._to_rgba)."""

    code: int  # layout.CONV_*
    alpha: bool = False  # CONV_RGB: channel 3 is alpha
    key: int | None = None  # CONV_I32: the transparency key
    table_key: tuple | None = None  # CONV_TABLE: the table's identity and contents
    table: np.ndarray | None = None


_RGB = _Conversion(int(L.CONV_RGB))  # what an image already filled to RGB needs


@dataclasses.dataclass
class _Job:
    index: int
    src: np.ndarray  # (H, W, C) native-width values
    dt: int
    nch: int
    src_w: int
    src_h: int
    out_w: int  # resized size
    out_h: int
    pre_convert: bool  # fill at source size (-> RGB uint8) before resizing
    resample: str  # "none" | "bicubic" | "premultiplied" | "nearest"
    passes: tuple[str, ...]
    conversion: _Conversion
    composite: bool  # the fill composites on the background
    plan_grid: tuple[int, int, int] = (1, 0, 0)  # geometry.plan's grid: sizes the output, checks
    # arena offsets, set per chunk by _layout_arenas
    src_off: int = 0
    conv_off: int = 0
    mid_off: int = 0

    @property
    def filled_first(self) -> bool:
        """The fill runs at the source size (convert_kernel) and its RGB image is resized."""
        return self.pre_convert and bool(self.passes)

    @property
    def pass_dt(self) -> int:
        """Storage kind of what the passes and the tail read."""
        return int(L.U8) if self.filled_first else self.dt

    @property
    def pass_nch(self) -> int:
        return 3 if self.filled_first else self.nch

    @property
    def mid_shape(self) -> tuple[int, int]:
        """(height, width) of the first pass's output."""
        if self.passes[0] == "h":
            return self.src_h, self.out_w
        return self.out_h, self.src_w


def _native_array(img: Image.Image) -> tuple[np.ndarray, int]:
    mode = img.mode
    w, h = img.size
    if mode in MODES_16:
        arr = np.frombuffer(img.tobytes(), dtype=i16_dtype(mode)).reshape(h, w)
        return arr.astype(np.uint16), int(L.U16)
    if mode == "I":
        return np.asarray(img, dtype=np.int32).reshape(h, w), int(L.I32)
    if mode == "F":
        return np.asarray(img, dtype=np.float32).reshape(h, w), int(L.F32)
    if mode == "1":
        return (np.asarray(img).reshape(h, w).astype(np.uint8) * 255), int(L.U8)
    arr = np.asarray(img)
    if arr.dtype != np.uint8:
        raise InputError(f"mode {mode!r}: unexpected array type {arr.dtype}")
    mask = rs.domain_xor(mode)
    if mask is not None:
        arr = arr ^ mask
    return arr, int(L.U8)


def _conversion(img: Image.Image, bg: TransparentBgConfig | None, resized: bool) -> _Conversion:
    """The fill's conversion of `img` (as the reference sees it: resized or not)."""
    mode = img.mode
    use_alpha = fill_uses_alpha(img, bg)
    if mode == "RGB":
        return _RGB
    if mode in ("RGBA", "RGBX"):
        return _Conversion(int(L.CONV_RGB), alpha=use_alpha and mode == "RGBA")
    if mode == "CMYK":
        return _Conversion(int(L.CONV_CMYK))
    if mode == "I":
        trns = img.info.get("transparency") if use_alpha else None
        return _Conversion(int(L.CONV_I32), key=int(trns) if isinstance(trns, int) else None)
    if mode == "F":
        return _Conversion(int(L.CONV_F32))
    return _Conversion(int(L.CONV_TABLE), table_key=table_key(img, use_alpha, resized),
                       table=conversion_table(img, use_alpha, resized))


def _make_job(index: int, img: Image.Image, config: PreprocessConfig, p: ResizePlan | None = None) -> _Job:
    """The job of one image, planned by `geometry.plan` (or by `p`: a video frame takes its
    chunk's plan, `pipelines.gpu.video`)."""
    if img.mode not in SUPPORTED_MODES:
        raise InputError(
            f"mode {img.mode!r} is not supported by the GPU pipeline "
            f"(supported: {', '.join(sorted(SUPPORTED_MODES))})", source=f"image[{index}]",
        )
    p = plan(img.width, img.height, config) if p is None else p
    bg = config.transparent_bg_config
    arr, dt = _native_array(img)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    pre = config.fill_stage == "before_resize" and img.mode != "RGB"
    size = (p.new_w, p.new_h)
    # before_resize: fill(img) -> RGB uint8, then Pillow resizes that RGB image
    kind = resample_kind("RGB" if pre else img.mode, img.size, size)
    passes = () if kind in ("none", "nearest") else rs.pass_order(img.width, img.height, *size)
    # The table must describe the image the reference converts: the resized one, when the
    # resize ran in the image's own mode (premultiplied modes do not use palette tables).
    resized = not pre and kind in ("bicubic", "nearest")
    job = _Job(index, np.ascontiguousarray(arr), dt, arr.shape[2], img.width, img.height,
               p.new_w, p.new_h, pre, kind, passes, _conversion(img, bg, resized),
               fill_uses_alpha(img, bg), plan_grid=tuple(int(v) for v in p.grid_thw))
    _check_offsets(job, config.patch_size)
    return job


def _check_offsets(job: _Job, patch: int) -> None:
    """Offsets inside one image are int32 in the kernels: refuse images that overflow them."""
    sizes = [job.src.size, job.src_h * job.src_w * 3, job.plan_grid[1] * job.plan_grid[2] * 3 * patch * patch]
    if job.passes:
        sizes.append(job.mid_shape[0] * job.mid_shape[1] * job.pass_nch)
    if max(sizes) >= L.MAX_IMAGE_ELEMENTS:
        raise InputError(f"{job.src_w}x{job.src_h}x{job.nch} is too large for the GPU pipeline "
                         f"(int32 offsets inside an image)", source=f"image[{job.index}]")
