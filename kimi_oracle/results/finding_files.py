"""Finding directories on disk: lossless input files and the atomic write of findings/<id>/.

A finding directory `DIR/findings/<id>/` holds everything needed to reproduce one failure:
`case.json` (check, config, generator parameters, seed, versions), the input image(s) in a
lossless format that keeps the mode (PNG where it can, TIFF otherwise, raw bytes as a last
resort), `stats.json`, `diff.png` and a readable `report.md`. Directories are written to a
temporary name and renamed into place, so a reader never sees half a finding, and an existing
finding is never overwritten.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

from PIL import Image

from kimi_oracle.core.errors import WriteError
from kimi_oracle.core.files import fsync_dir, to_json
from kimi_oracle.core.images import RAW_MAGIC, decode, encoded_bytes, pack_raw, read_file, unpack_raw
from kimi_oracle.results.diffs import diff_image
from kimi_oracle.results.finding import Finding
from kimi_oracle.results.markdown import finding_markdown



def _faithful(img: Image.Image, data: bytes) -> bool:
    from kimi_oracle.inputs.generators import images_equal

    try:
        with Image.open(io.BytesIO(data)) as back:
            back.load()
            return images_equal(img, back)
    except Exception:
        return False


def encode_input(img: Image.Image) -> tuple[str, bytes]:
    """(extension, bytes) of a lossless file that reloads to the same mode, pixels, palette and
    transparency: PNG when it round-trips, else TIFF, else a raw container (`.kimiraw`). An image
    opened from a file (a request: EXIF, frames, the decoder's input) is stored as that file."""
    data = encoded_bytes(img)
    if data is not None:
        return (img.format or "bin").lower(), data
    params: dict[str, Any] = {}
    if "transparency" in img.info:
        params["transparency"] = img.info["transparency"]
    # (PNG is lossless at any compression level; level 1 writes a finding's inputs fastest)
    for ext, fmt, level in (("png", "PNG", {"compress_level": 1}), ("tiff", "TIFF", {})):
        buf = io.BytesIO()
        try:
            img.save(buf, fmt, **params, **level)
        except Exception:
            continue
        data = buf.getvalue()
        if _faithful(img, data):
            return ext, data
    return "kimiraw", pack_raw(img)


def load_input(path: str | os.PathLike) -> Image.Image:
    """Load an input written by `encode_input` (or any image file), fully decoded, under the caps."""
    data = read_file(path)
    if data.startswith(RAW_MAGIC):
        return unpack_raw(data)
    return decode(data, name=str(path))



# Names write_finding itself uses: extra files may not take them.
_RESERVED_NAMES = ("case.json", "stats.json", "diff.png", "report.md")


def _check_extra_names(extra_files: Mapping[str, bytes]) -> None:
    for name in extra_files:
        if (not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith(".")
                or name in _RESERVED_NAMES or name.startswith(("input.", "input-", "original-"))):
            raise ValueError(f"extra finding file {name!r}: a plain file name that write_finding does not "
                             f"use itself (not {', '.join(_RESERVED_NAMES)}, input*, original-*)")


def write_finding(out_dir: str | os.PathLike, finding: Finding, *,
                  extra_files: Mapping[str, bytes] | None = None) -> Path:
    """Write `out_dir/findings/<id>/` atomically; an existing finding with that id is kept as is
    (the same case failing the same check again) and its path returned.

    `extra_files` (name -> bytes, e.g. a fuzzer's raw input as `fuzz-input.bin`) are written into
    the same temporary directory before the rename, so they appear together with the finding."""
    extra_files = dict(extra_files or {})
    _check_extra_names(extra_files)
    root = Path(out_dir) / "findings"
    root.mkdir(parents=True, exist_ok=True)
    final = root / finding.id
    finding.written_here = False
    if final.exists():
        finding.path = final
        return final
    tmp = Path(tempfile.mkdtemp(prefix=f".{finding.id}.", dir=root))
    try:
        for name, data in extra_files.items():
            (tmp / name).write_bytes(bytes(data))
        files = _write_inputs(tmp, finding)
        (tmp / "case.json").write_text(to_json(finding.case_dict(files)), encoding="utf-8")
        (tmp / "stats.json").write_text(to_json({"check": finding.check, "message": finding.message,
                                                 "stats": finding.stats}), encoding="utf-8")
        diff = _write_diff(tmp, finding)
        (tmp / "report.md").write_text(finding_markdown(finding, directory=final, has_diff=diff is not None),
                                        encoding="utf-8", errors="backslashreplace")
        for child in tmp.iterdir():
            with open(child, "rb") as fh:
                os.fsync(fh.fileno())
        try:
            os.rename(tmp, final)
            finding.written_here = True
            fsync_dir(root)
        except OSError:
            if final.exists():  # another writer got there first: keep theirs
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                raise
    except OSError as exc:  # (a full disk, the file-size limit: one line naming the finding)
        shutil.rmtree(tmp, ignore_errors=True)
        raise exc if isinstance(exc, WriteError) else WriteError(str(final), exc) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finding.path = final
    return final


def _write_inputs(tmp: Path, finding: Finding) -> list[dict[str, Any]]:
    """Write the finding's inputs (and original files) into `tmp`: their case.json entries."""
    files = []
    for i, img in enumerate(finding.images):
        ext, data = encode_input(img)
        name = f"input.{ext}" if len(finding.images) == 1 or i == 0 else f"input-{i}.{ext}"
        (tmp / name).write_bytes(data)
        entry = {"file": name, "sha256": hashlib.sha256(data).hexdigest()}
        raw = finding.raw_inputs[i] if i < len(finding.raw_inputs) else None
        if raw is not None:
            src = finding.sources[i] if i < len(finding.sources) else None
            suffix = Path(src).suffix if src else ".bin"
            raw_name = f"original-{i}{suffix}"
            (tmp / raw_name).write_bytes(raw)
            entry["original_file"] = raw_name
        files.append(entry)
    return files


def _write_diff(tmp: Path, finding: Finding) -> Image.Image | None:
    """Write `tmp/diff.png` when the finding has both results: the picture, or None."""
    diff = None
    if finding.expected is not None and finding.actual is not None:
        diff = diff_image(finding.expected, finding.actual, finding.config,
                          int(finding.stats.get("worst", {}).get("image", 0)) if isinstance(
                              finding.stats.get("worst"), dict) else 0)
    if diff is not None:
        diff.save(tmp / "diff.png", compress_level=1)  # (the fastest level: 25 % of a write)
    return diff
