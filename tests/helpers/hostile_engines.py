"""Engines that lie, leak or escape: each is the held-out adapter (which passes) with one hostile
twist. Each factory is `engine(config, tokenizer)`, named `tests/helpers/hostile_engines.py:NAME`.

- `short_rows`: encode returns t*h*(w-1) rows per item and writes that grid back into the item
  (a deferred device path that trusts its own output).
- `liar`: a batch-dependent +1.0 on every item after the first, returned as a tensor subclass
  whose `__torch_function__` answers `torch.equal` with True.
- `float_ids`: prepare's ids come back as floats (the pad id as pad + 0.9).
- `chatty`, `writes_cwd`, `hog`, `forks`, `slow_factory`: the confinement probes (output, the
  working directory, memory, descendants, a factory that hangs).
"""

from __future__ import annotations

import os
import sys
import time

import torch

from held_out_adapter import HeldOutEngine


class ShortRows(HeldOutEngine):
    def encode(self, items, dp_size):
        out = []
        for item in items:
            t, h, w = item.setdefault("own_grid", list(item["grid_thw"]))  # (before its first rewrite)
            rows = item["rows"].reshape(h, w, *item["rows"].shape[1:])[:, : w - 1].reshape(-1, *item["rows"].shape[1:])
            item["grid_thw"] = [t, h, w - 1]
            out.append(rows)
        return torch.cat(out, 0)


class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.equal:
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


class Lies(HeldOutEngine):
    def encode(self, items, dp_size):
        rows = [it["rows"] + (1.0 if k else 0.0) for k, it in enumerate(items)]
        return torch.cat(rows, 0).as_subclass(Liar)


class FloatIds(HeldOutEngine):
    def prepare(self, prompt_ids, images, paths):
        ids, items = super().prepare(prompt_ids, images, paths)
        return [t + 0.9 if t == self.tokenizer.media_pad_id else float(t) for t in ids], items


class Chatty(HeldOutEngine):
    def encode(self, items, dp_size):
        for k in range(68):
            print(f"chatty engine line {k}")
        print("chatty engine on stderr", file=sys.stderr)
        return super().encode(items, dp_size)


class WritesCwd(HeldOutEngine):
    def encode(self, items, dp_size):
        with open("engine-was-here.txt", "w") as fh:
            fh.write("x")
        return super().encode(items, dp_size)


class Hog(HeldOutEngine):
    def encode(self, items, dp_size):
        blob = bytearray(1536 << 20)  # 1.5 GiB: over any --memory-limit the tests set
        blob[-1] = 1
        return super().encode(items, dp_size)


class Forks(HeldOutEngine):
    def encode(self, items, dp_size):
        marker = os.environ.get("KIMI_TEST_CHILD_PID")
        if marker and not os.path.exists(marker):
            pid = os.fork()
            if pid == 0:  # the child: outlive everything, then write a file
                try:
                    time.sleep(3600)
                finally:
                    os._exit(0)
            with open(marker, "w") as fh:
                fh.write(str(pid))
        return super().encode(items, dp_size)


def short_rows(config, tokenizer):
    return ShortRows(config, tokenizer)


def liar(config, tokenizer):
    return Lies(config, tokenizer)


def float_ids(config, tokenizer):
    return FloatIds(config, tokenizer)


def chatty(config, tokenizer):
    return Chatty(config, tokenizer)


def writes_cwd(config, tokenizer):
    return WritesCwd(config, tokenizer)


def hog(config, tokenizer):
    return Hog(config, tokenizer)


def forks(config, tokenizer):
    return Forks(config, tokenizer)


def slow_factory(config, tokenizer):
    time.sleep(3600)
