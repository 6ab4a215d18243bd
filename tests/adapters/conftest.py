"""The pinned real releases, fetched once with `pip download --no-deps` into the engine cache
(`$KIMI_ORACLE_ENGINE_CACHE`, else ~/.cache/kimi-oracle/engines; .ci/run keeps it between runs).
Without a network and without a cached wheel the tests that need a release are skipped."""

from __future__ import annotations

import pytest

from kimi_oracle.adapters.sources import Tree, locate
from kimi_oracle.core.errors import CandidateError

PINNED = {"sglang": "0.5.23", "transformers": "5.23.0"}


def _release(engine: str) -> Tree:
    try:
        return locate(engine, engine, PINNED[engine])
    except CandidateError as exc:  # no network and nothing cached
        pytest.skip(f"{engine}=={PINNED[engine]} cannot be fetched here: {exc}")


@pytest.fixture(scope="session")
def sglang_tree() -> Tree:
    """SGLang 0.5.23's package tree (unpacked from the released wheel)."""
    return _release("sglang")


@pytest.fixture(scope="session")
def transformers_tree() -> Tree:
    """transformers 5.23.0's package tree (unpacked from the released wheel)."""
    return _release("transformers")
