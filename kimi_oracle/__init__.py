"""kimi-oracle: a test oracle and fuzzing suite for Kimi-K3 / K2.5 image preprocessing."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
