"""Helpers for the nightly tests: paths of the committed corpora and the planted candidates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parent.parent
FUZZ = REPO / "fuzz"
PLANTED = HERE / "candidates_for_tests.py"


def planted(name: str) -> str:
    """Candidate spec of a planted-failure candidate."""
    return f"{PLANTED}:{name}"


def run_nightly(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """`kimi-oracle nightly ...` as CI runs it: a separate process."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.run([sys.executable, "-m", "kimi_oracle", "nightly", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO, **kwargs)


@pytest.fixture(scope="session")
def fuzz_dir() -> Path:
    return FUZZ
