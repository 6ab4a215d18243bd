"""Shared fixtures: paths of the committed corpus and small image builders."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))

CORPUS = TESTS / "data" / "corpus"


@pytest.fixture
def corpus_dir() -> Path:
    return CORPUS
