"""Shared fixtures: paths of the committed corpus and small image builders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Without CUDA, the GPU pipeline runs its Triton kernels in the interpreter on CPU tensors.
# Triton reads this when the kernels are first imported, so set it before any test imports them.
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:  # pragma: no cover - torch is a dependency
    pass

# tests/ and tests/helpers/ are on sys.path (pyproject's `pythonpath`): the shared helper modules
# (checkpoint_model, planner_samples, ...) and the mutants package import by their names.
TESTS = Path(__file__).parent

CORPUS = TESTS / "data" / "corpus"


@pytest.fixture
def corpus_dir() -> Path:
    return CORPUS
