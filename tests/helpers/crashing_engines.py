"""Engines that misbehave as processes: one dies on encode, one hangs, one cannot be made."""

from __future__ import annotations

import os
import time

from kimi_oracle.pipelines.engines.sglang_0_5_23_requests import RequestLayer


class Dies(RequestLayer):
    def encode(self, items, dp_size):
        if len(items) > 1:
            os._exit(3)
        return super().encode(items, dp_size)


class Hangs(RequestLayer):
    def encode(self, items, dp_size):
        if len(items) > 1:
            time.sleep(3600)
        return super().encode(items, dp_size)


def dies(config, tokenizer):
    return Dies(config, tokenizer)


def hangs(config, tokenizer):
    return Hangs(config, tokenizer)


def broken(config, tokenizer):
    raise RuntimeError("no device")


class Announces(RequestLayer):
    """Writes KIMI_TEST_MARKER on its second encode call (an event a test waits for), then works on."""

    calls = 0

    def encode(self, items, dp_size):
        Announces.calls += 1
        if Announces.calls == 40:
            open(os.environ["KIMI_TEST_MARKER"], "w").close()
        return super().encode(items, dp_size)


def announces(config, tokenizer):
    return Announces(config, tokenizer)
