"""The oracle's own torch work runs on one intra-op thread.

Comparisons and the diagnosis' torch resamples work on tensors of a few thousand values per
example; with torch's default thread pool a single `torch.round` on such a tensor took
milliseconds on a busy 2-core machine, with one thread microseconds (docs/measurements.md). No
result depends on the thread count. Candidates' executors have their own setting (`fuzzers.sandbox.candidate_threads`).
"""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the block with one intra-op torch thread; the previous count is restored after."""
    import torch  # here, not at the top: the CLI's refusal paths import this module without torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


__all__ = ["one_torch_thread"]
