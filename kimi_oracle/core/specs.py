"""How a candidate's, planner's or engine's spec names what it loads: one rule for every reader."""

from __future__ import annotations

__all__ = ["spec_path", "split_spec"]


def split_spec(spec: str) -> tuple[str, str]:
    """(target, attr) of `target:attr`; (spec, "") without a colon."""
    target, sep, attr = spec.rpartition(":")
    return (target, attr) if sep else (spec, "")


def spec_path(spec: str) -> str | None:
    """The file path a spec names (`c/x.py:fn` -> `c/x.py`, `c/x.py` -> `c/x.py`), or None: a spec
    naming a path (a `/` or a backslash, or a `.py` file) is a path, never an entry point's or a
    module's name."""
    target, _ = split_spec(spec)
    return target if target.endswith(".py") or "/" in target or "\\" in target else None
