"""A held-out request-layer adapter, written only against the documented engine interface.

It imports nothing from kimi_oracle: it reads the config's checkpoint keys as attributes, uses
the tokenizer's documented methods (`encode(text, allowed_special="all")`, `media_pad_id`), keeps
its items as plain dicts (`grid_thw`, `offsets` and its own keys), names no `paths` (so it has the
one route "default"), and has its own NaViT arithmetic from the spec, its own cache (keyed by the
image's bytes and the config's keys) and its own CPU pixels (Pillow bicubic on RGB, float32
normalization, zero padding). It stands for an adapter of a real engine's request layer.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch


def _plan(w, h, cfg):
    p, m = cfg.patch_size, cfg.merge_kernel_size
    s = min(1.0, math.sqrt(cfg.in_patch_limit / (max(1.0, w // p) * max(1.0, h // p))),
            cfg.patch_limit_on_one_side * p / w, cfg.patch_limit_on_one_side * p / h)
    nw = min(max(1, int(w * s)), cfg.patch_limit_on_one_side * p)
    nh = min(max(1, int(h * s)), cfg.patch_limit_on_one_side * p)
    f = m * p
    pw, ph = (f - nw % f) % f, (f - nh % f) % f
    tokens = cfg.fixed_output_tokens or ((nh + ph) // f) * ((nw + pw) // f)
    return (nw, nh, pw, ph), (1, (nh + ph) // p, (nw + pw) // p), tokens


def _pixels(img, cfg, size, pads):
    from PIL import Image

    nw, nh = size
    rgb = img.convert("RGB") if img.mode not in ("I;16", "I;16B", "I", "F") else img.convert("L").convert("RGB")
    if rgb.size != (nw, nh):
        rgb = rgb.resize((nw, nh), Image.BICUBIC)
    x = np.asarray(rgb, dtype=np.float32) / 255.0
    x = (x - np.asarray(cfg.image_mean, dtype=np.float32)) / np.asarray(cfg.image_std, dtype=np.float32)
    x = np.pad(x, ((0, pads[1]), (0, pads[0]), (0, 0)))
    p = cfg.patch_size
    gh, gw = x.shape[0] // p, x.shape[1] // p
    patches = x.reshape(gh, p, gw, p, 3).transpose(0, 2, 4, 1, 3).reshape(gh * gw, 3, p, p)
    return torch.from_numpy(np.ascontiguousarray(patches))


class HeldOutEngine:
    def __init__(self, config, tokenizer):
        self.config = config
        self.tokenizer = tokenizer
        self.cache = {}

    def configure(self, config):
        self.config = config

    def _key(self, img):
        cfg = self.config
        keys = (cfg.patch_size, cfg.merge_kernel_size, cfg.in_patch_limit, cfg.patch_limit_on_one_side,
                cfg.fixed_output_tokens, tuple(cfg.image_mean), tuple(cfg.image_std))
        digest = hashlib.sha256(img.mode.encode() + repr(img.size).encode() + img.tobytes()
                                + repr(img.getpalette()).encode()).hexdigest()
        return digest, keys

    def prepare(self, prompt_ids, images, paths):
        pad = self.tokenizer.media_pad_id
        ids, items = [], []
        for t in prompt_ids:
            if t != pad:
                ids.append(t)
                continue
            img = images[len(items)]
            key = self._key(img)
            if key not in self.cache:
                (nw, nh, pw, ph), grid, tokens = _plan(img.width, img.height, self.config)
                self.cache[key] = (grid, tokens, _pixels(img, self.config, (nw, nh), (pw, ph)))
            grid, tokens, rows = self.cache[key]
            head = self.tokenizer.encode(f"<|media_begin|>image {img.width}x{img.height}<|media_content|>",
                                         allowed_special="all")
            start = len(ids) + len(head)
            ids += head + [pad] * tokens + self.tokenizer.encode("<|media_end|>", allowed_special="all")
            items.append({"grid_thw": list(grid), "offsets": (start, start + tokens - 1), "rows": rows})
        return ids, items

    def encode(self, items, dp_size):
        # Round-robin over ranks, then back in the order given.
        shards = [[k for k in range(len(items)) if k % dp_size == r] for r in range(dp_size)]
        out = [None] * len(items)
        for shard in shards:
            for k in shard:
                out[k] = items[k]["rows"]
        return torch.cat(out, 0)


def engine(config, tokenizer):
    """A held-out adapter (documented interface only)."""
    return HeldOutEngine(config, tokenizer)
