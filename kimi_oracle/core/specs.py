"""How a candidate's, planner's or engine's spec names what it loads: one rule for every reader."""

from __future__ import annotations

import os
import re
from pathlib import Path

from kimi_oracle.core.errors import InputError

# `ENGINE[-PATH]@SOURCE` (kimi_oracle.adapters): a built-in engine's name, then where it loads from.
ENGINE_NAMES = ("sglang", "transformers", "vllm", "paddleformers", "mlx-vlm", "lmdeploy")  # adapters.engines.ENGINES' keys
_ENGINE_AT = re.compile(rf"^({'|'.join(ENGINE_NAMES)})(-[a-z0-9]+)*@")

__all__ = ["ENGINE_NAMES", "absolute_spec", "refuse_spec_inside", "spec_inside", "spec_path", "split_spec"]


def split_spec(spec: str) -> tuple[str, str]:
    """(target, attr) of `target:attr`; (spec, "") without a colon."""
    target, sep, attr = spec.rpartition(":")
    return (target, attr) if sep else (spec, "")


def spec_path(spec: str) -> str | None:
    """The file path a spec names (`c/x.py:fn` -> `c/x.py`, `c/x.py` -> `c/x.py`), or None: a spec
    naming a path (a `/` or a backslash, or a `.py` file) is a path, never an entry point's or a
    module's name."""
    if _ENGINE_AT.match(spec):  # an engine loaded from SOURCE: a name, never a file of code
        return None
    target, _ = split_spec(spec)
    return target if target.endswith(".py") or "/" in target or "\\" in target else None


def absolute_spec(spec: str) -> str:
    """`spec` with its file path made absolute against the current directory (`c/x.py:fn` ->
    `/cwd/c/x.py:fn`); other specs as they are. Recorded so in a finding folder, so that a replay
    from anywhere loads what the run loaded."""
    if _ENGINE_AT.match(spec):  # ENGINE@SOURCE: a source that is a path, made absolute
        name, _, source = spec.partition("@")
        return f"{name}@{os.path.abspath(source)}" if os.path.exists(source) else spec
    target = spec_path(spec)
    if target is None:
        return spec
    return os.path.abspath(target) + spec[len(target):]


def spec_inside(spec: str, directory: str | os.PathLike) -> bool:
    """Whether the file `spec` names, resolved as loading it would resolve it (an absolute path,
    or a relative one against the current directory), lies inside `directory` (a finding folder:
    untrusted, never a source of code). For `ENGINE@SOURCE` that file is SOURCE."""
    target = spec.partition("@")[2] if _ENGINE_AT.match(spec) else spec_path(spec)
    if target is None:
        return False
    try:
        resolved, folder = Path(target).resolve(), Path(directory).resolve()
    except OSError:
        return False
    return resolved == folder or folder in resolved.parents


def refuse_spec_inside(spec: str, directory: str | os.PathLike, what: str = "candidate",
                       doc: str = "case.json") -> None:
    """A finding folder is untrusted: never import a file that lives inside it. The spec is
    resolved as loading it resolves it (absolute as recorded, or relative to the current
    directory: `spec_inside`), so a relative spec recorded by an older run still replays."""
    target = spec_path(spec)
    # (and a relative spec naming a file the folder holds: what a crafted folder would plant)
    planted = target is not None and not Path(target).is_absolute() and (Path(directory) / target).exists()
    if spec_inside(spec, directory) or planted:
        raise InputError(f"{doc} names {what} {spec!r}, a file inside the finding folder: refused "
                         f"(a finding folder is untrusted); give --{what} to replay it", source=str(directory))
