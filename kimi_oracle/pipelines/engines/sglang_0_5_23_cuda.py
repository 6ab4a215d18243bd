"""The CUDA half of the `sglang-0.5.23` model: SGLang 0.5.23 normalizes and patchifies contiguous
CUDA batches with one Triton kernel instead of `addcmul` (its `normalize_and_patchify`).

Each program writes `block` consecutive elements of the (B, gh·gw, C, p, p) output: element e
reads its source pixel (0.0 outside the resized image: the padding) and stores
`value * scale[c] + bias[c]`. The kernel is compiled with Triton's defaults, fp fusion on, as the
engine's is. Imported only for CUDA tensors (importing it imports triton).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Above this many output elements the engine falls back to its torch path (int32 offsets).
MAX_ELEMENTS = 2**31 - 1
BLOCK = 256


@triton.jit
def _kernel(src, scale_ptr, bias_ptr, dst, C: tl.constexpr, height, width, gh, gw, P: tl.constexpr, total,
            BLOCK_SIZE: tl.constexpr):
    e = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    live = e < total
    inner = e % (P * P)
    px = inner % P
    py = inner // P
    rest = e // (P * P)
    c = rest % C
    rest = rest // C
    gx = rest % gw
    rest = rest // gw
    gy = rest % gh
    b = rest // gh
    y = gy * P + py
    x = gx * P + px
    inside = live & (y < height) & (x < width)
    value = tl.load(src + ((b * C + c) * height + y) * width + x, mask=inside, other=0.0)
    s = tl.load(scale_ptr + c, mask=live)
    o = tl.load(bias_ptr + c, mask=live)
    tl.store(dst + e, value * s + o, mask=live)


def applies(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, total: int) -> bool:
    """Where the engine takes the kernel: CUDA (not ROCm), contiguous operands, int32-sized."""
    return (x.is_cuda and torch.version.hip is None and x.is_contiguous() and scale.is_contiguous()
            and bias.is_contiguous() and total <= MAX_ELEMENTS)


def normalize_and_patchify(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, patch: int,
                           padded_h: int, padded_w: int) -> torch.Tensor:
    """(B, gh·gw, C, p, p) = pad(x)·scale + bias, patchified, by the kernel."""
    b, c, h, w = x.shape
    gh, gw = padded_h // patch, padded_w // patch
    out = torch.empty((b, gh * gw, c, patch, patch), dtype=x.dtype, device=x.device)
    total = out.numel()
    _kernel[(triton.cdiv(total, BLOCK),)](x, scale, bias, out, c, h, w, gh, gw, patch, total, BLOCK)
    return out
