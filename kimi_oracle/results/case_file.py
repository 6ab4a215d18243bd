"""Case-file validation: reading an untrusted finding folder's case.json and its input files."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.files import load_json
from kimi_oracle.core.images import RAW_MAGIC, decode, default_max_pixels, read_file, unpack_raw
from kimi_oracle.results.finding import FINDING_SCHEMA, FINDING_SCHEMA_VERSION



def read_case(path: str | os.PathLike) -> tuple[dict[str, Any], Path]:
    """Read and validate a finding's case.json (given the directory or the file): (case, directory).

    A finding folder is untrusted input (downloaded from CI, edited by hand): every field the
    replay uses is checked here, and an error names the field.
    """
    path = Path(path)
    case_file = path / "case.json" if path.is_dir() else path
    try:
        # (core.files: a regular file, capped; nesting bounded, every number finite, naming its key)
        case = load_json(case_file, max_bytes=MAX_CASE_BYTES)
    except InputError as exc:
        if not case_file.exists():
            raise InputError("no case.json here", source=str(path)) from None
        raise InputError(f"cannot read the finding: {exc}", source=str(case_file)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the finding: {exc}", source=str(case_file)) from None
    if not isinstance(case, dict) or case.get("schema") != FINDING_SCHEMA:
        raise InputError("not a kimi-oracle finding (schema field missing)", source=str(case_file))
    version = case.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise _field_error(case_file, "schema_version", "must be an integer")
    if version > FINDING_SCHEMA_VERSION:
        raise InputError(f"finding schema version {version} is newer than this "
                         f"kimi-oracle understands ({FINDING_SCHEMA_VERSION})", source=str(case_file))
    _validate_case(case, case_file)
    return case, case_file.parent


MAX_CASE_BYTES = 16 << 20


def _field_error(case_file: Path, field_name: str, problem: str) -> InputError:
    return InputError(f"case.json field {field_name!r} {problem}", source=str(case_file))


def _validate_case(case: dict[str, Any], case_file: Path) -> None:
    from kimi_oracle.core.errors import ConfigError
    from kimi_oracle.inputs.generators import CaseParams
    from kimi_oracle.oracle.kinds import FINDING_KINDS, Tolerance, ToleranceError

    if case.get("check") not in FINDING_KINDS:
        raise _field_error(case_file, "check", f"must be one of {', '.join(FINDING_KINDS)}")
    for key in ("candidate", "tolerance"):
        if case.get(key) is not None and not isinstance(case[key], str):
            raise _field_error(case_file, key, "must be a string")
    if case.get("tolerance"):
        try:
            Tolerance.parse(case["tolerance"])
        except ToleranceError as exc:
            raise _field_error(case_file, "tolerance", f"is not a tolerance: {exc}") from None
    if not isinstance(case.get("config"), dict):
        raise _field_error(case_file, "config", "must be an object (the checkpoint's preprocessor config)")
    try:
        PreprocessConfig.from_hf_json(case["config"])
    except ConfigError as exc:
        raise _field_error(case_file, "config", f"is not a valid config: {exc}") from None
    images = case.get("images")
    if not isinstance(images, list):
        raise _field_error(case_file, "images", "must be a list")
    cap = default_max_pixels()
    for i, entry in enumerate(images):
        where = f"images[{i}]"
        if not isinstance(entry, dict):
            raise _field_error(case_file, where, "must be an object")
        for key in ("file", "original_file", "sha256"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                raise _field_error(case_file, f"{where}.{key}", "must be a string")
        for key in ("file", "original_file"):
            if entry.get(key) is not None:
                _plain_name(entry[key], case_file, f"{where}.{key}")
        params = entry.get("params")
        if params is not None:
            if not isinstance(params, dict):
                raise _field_error(case_file, f"{where}.params", "must be an object")
            try:
                p = CaseParams.from_dict(params)
            except (TypeError, ValueError) as exc:
                raise _field_error(case_file, f"{where}.params", f"are not generator parameters: {exc}") from None
            if p.width * p.height > cap:
                raise _field_error(case_file, f"{where}.params",
                                   f"ask for {p.width}x{p.height} pixels, over the pixel cap of {cap}")
        if params is None and not entry.get("file"):
            raise _field_error(case_file, where, "has neither a file nor generator parameters")


def _plain_name(name: str, case_file: Path, field_name: str) -> None:
    if (not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name
            or name.startswith(".") or Path(name).is_absolute()):
        raise _field_error(case_file, field_name, f"must be a plain file name inside the finding folder, not {name!r}")


def finding_file(directory: Path, name: str, *, field_name: str = "file") -> Path:
    """The path of a file a case.json names, checked to stay inside the finding folder (a
    symbolic link pointing elsewhere is refused)."""
    _plain_name(name, directory / "case.json", field_name)
    path = directory / name
    try:
        inside = path.resolve().parent == directory.resolve()
    except OSError:
        inside = False
    if not inside:
        raise _field_error(directory / "case.json", field_name, f"names {name!r}, which points outside the finding folder")
    return path


def load_case_image(directory: Path, entry: Mapping[str, Any], index: int) -> Image.Image | None:
    """The stored input of `entry` (None when the file is absent), after checking its name and its
    recorded SHA-256; raw containers and image files are both held to the pixel cap."""
    if not entry.get("file"):
        return None
    path = finding_file(directory, entry["file"], field_name=f"images[{index}].file")
    if not path.exists():
        return None
    data = read_file(path)
    digest = entry.get("sha256")
    if digest and hashlib.sha256(data).hexdigest() != digest:
        raise _field_error(directory / "case.json", f"images[{index}].sha256",
                           f"does not match {entry['file']} (the file was changed after the finding was written)")
    if data.startswith(RAW_MAGIC):
        return unpack_raw(data)
    return decode(data, name=str(path))
