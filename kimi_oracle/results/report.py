"""Findings on disk and reports: finding directories, JSON, JUnit XML, Markdown, diff images.

A finding directory `DIR/findings/<id>/` holds everything needed to reproduce one failure:
`case.json` (check, config, generator parameters, seed, versions), the input image(s) in a
lossless format that keeps the mode (PNG where it can, TIFF otherwise, raw bytes as a last
resort), `stats.json`, `diff.png` and a readable `report.md`. Directories are written to a
temporary name and renamed into place, so a reader never sees half a finding, and an existing
finding is never overwritten. The fuzzer, the nightly runner and the gate share this module.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

import numpy as np
from PIL import Image, ImageDraw

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.files import atomic_write_text, fsync_dir, load_json, to_json, utc_now, versions
from kimi_oracle.core.images import RAW_MAGIC, decode, default_max_pixels, encoded_bytes, pack_raw, read_file, unpack_raw
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.core.text import xml_text
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.oracle.checks import ACCEPTS_INVALID, FEATURE_LENGTH, GRID_MISMATCH, INVARIANCE, PIXEL_MISMATCH

FINDING_SCHEMA = "kimi-oracle.finding"
FINDING_SCHEMA_VERSION = 1
RUN_SCHEMA = "kimi-oracle.fuzz-run"
RUN_SCHEMA_VERSION = 1


# ---------------------------------------------------------------------------------------------
# input images


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


# ---------------------------------------------------------------------------------------------
# findings


@dataclass
class Finding:
    """One failure, with everything needed to write and reproduce it."""

    check: str
    message: str
    candidate: str
    config: PreprocessConfig
    images: list[Image.Image] = field(default_factory=list, repr=False)
    params: list[dict[str, Any] | None] = field(default_factory=list)
    tolerance: str = "exact"
    engine: str = "hypothesis"
    seed: int | None = None
    example: int | None = None  # how many examples the run had tried when it found this
    stats: dict[str, Any] = field(default_factory=dict)
    sources: list[str | None] = field(default_factory=list)  # original file names (check command)
    raw_inputs: list[bytes | None] = field(default_factory=list, repr=False)  # original bytes
    expected: PreprocessResult | None = field(default=None, repr=False)
    actual: PreprocessResult | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)
    # Diagnosis (oracle.diagnosis.finding_diagnosis): root-cause ids ([] for non-pixel checks) and
    # levels over the values that differ; the residual is what the root causes leave unexplained.
    root_causes: list[str] = field(default_factory=list)
    max_levels: float | None = 0.0
    mean_levels: float | None = 0.0
    residual_max_levels: float | None = 0.0
    residual_mean_levels: float | None = 0.0
    attribution: dict[str, Any] | None = None
    key: str = ""  # oracle.grouping.finding_key of the failure (the finding's identity in a run)
    hits: int = 1  # examples of the run that failed with this key (shrinking not counted)
    max_levels_seen: float | None = None  # the largest difference seen for this key over the run
    path: Path | None = None
    written_here: bool = False  # set by write_finding: True when that call created the folder
    created: str = field(default_factory=utc_now)

    @property
    def kind(self) -> str:
        """The finding class used in summaries (equal to the failed check)."""
        return self.check

    @property
    def id(self) -> str:
        """Stable id: check plus a digest of what was run (config, inputs, candidate, policy).

        A finding without images (an input that killed a harness before it became one) is named
        by its raw input bytes, so that different inputs never share an id."""
        h = hashlib.sha256()
        h.update(json.dumps([self.check, self.candidate, self.tolerance, self.config.to_hf_json()],
                            sort_keys=True, default=str).encode())
        for i, img in enumerate(self.images):
            params = self.params[i] if i < len(self.params) else None
            if params is not None:
                h.update(json.dumps(params, sort_keys=True).encode())
            else:
                h.update(f"{img.mode}{img.size}".encode())
                h.update(hashlib.sha256(img.tobytes()).digest())
        if not self.images:
            for raw in self.raw_inputs:
                if raw is not None:
                    h.update(hashlib.sha256(raw).digest())
        if "invariance" in self.extra:
            h.update(json.dumps(self.extra["invariance"], sort_keys=True).encode())
        return f"{self.check}-{h.hexdigest()[:12]}"

    def case_dict(self, files: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """The content of case.json."""
        images = []
        for i, img in enumerate(self.images):
            entry: dict[str, Any] = {"index": i, "mode": img.mode, "size": list(img.size)}
            if "transparency" in img.info:
                entry["transparency"] = img.info["transparency"].hex() if isinstance(
                    img.info["transparency"], bytes) else img.info["transparency"]
            entry["params"] = self.params[i] if i < len(self.params) else None
            entry["source"] = self.sources[i] if i < len(self.sources) else None
            if i < len(files):
                entry.update(files[i])
            images.append(entry)
        out = {
            "schema": FINDING_SCHEMA,
            "schema_version": FINDING_SCHEMA_VERSION,
            "id": self.id,
            "check": self.check,
            "kind": self.kind,
            "message": self.message,
            "engine": self.engine,
            "candidate": self.candidate,
            "tolerance": self.tolerance,
            "profile": self.config.name,
            "config": self.config.to_hf_json(),
            "seed": self.seed,
            "example": self.example,
            "key": self.key,
            "hits": self.hits,
            "max_levels_seen": self.max_levels_seen if self.max_levels_seen is not None else self.max_levels,
            "root_causes": list(self.root_causes),
            "max_levels": self.max_levels,
            "mean_levels": self.mean_levels,
            "residual_max_levels": self.residual_max_levels,
            "residual_mean_levels": self.residual_mean_levels,
            "attribution": self.attribution,
            "images": images,
            "created": self.created,
            "versions": versions(),
        }
        out.update(self.extra)
        return out


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
        (tmp / "case.json").write_text(to_json(finding.case_dict(files)), encoding="utf-8")
        (tmp / "stats.json").write_text(to_json({"check": finding.check, "message": finding.message,
                                                 "stats": finding.stats}), encoding="utf-8")
        diff = None
        if finding.expected is not None and finding.actual is not None:
            diff = diff_image(finding.expected, finding.actual, finding.config,
                              int(finding.stats.get("worst", {}).get("image", 0)) if isinstance(
                                  finding.stats.get("worst"), dict) else 0)
        if diff is not None:
            diff.save(tmp / "diff.png", compress_level=1)  # (the fastest level: 25 % of a write)
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
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finding.path = final
    return final


def read_case(path: str | os.PathLike) -> tuple[dict[str, Any], Path]:
    """Read and validate a finding's case.json (given the directory or the file): (case, directory).

    A finding folder is untrusted input (downloaded from CI, edited by hand): every field the
    replay uses is checked here, and an error names the field.
    """
    path = Path(path)
    case_file = path / "case.json" if path.is_dir() else path
    try:  # (core.files: a regular file, capped; nesting bounded, every number finite, naming its key)
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
    from kimi_oracle.oracle.checks import FINDING_KINDS, Tolerance, ToleranceError

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


# ---------------------------------------------------------------------------------------------
# images of results


def unpatchify(result: PreprocessResult, index: int, config: PreprocessConfig) -> np.ndarray | None:
    """float64 levels (Hp, Wp, 3) of image `index` of a result, using its own grid; None when the
    result's grids do not describe its rows."""
    from kimi_oracle.oracle.checks import levels_of

    try:
        grids = result.grid_thws.tolist()
        offsets = result.patch_offsets()
        if offsets[-1] != result.pixel_values.shape[0] or index >= len(grids):
            return None
        _, gh, gw = (int(v) for v in grids[index])
        p = config.patch_size
        rows = result.pixel_values[offsets[index] : offsets[index + 1]]
        if tuple(rows.shape[1:]) != (3, p, p) or rows.shape[0] != gh * gw:
            return None
        lv = levels_of(rows, config).reshape(gh, gw, 3, p, p)
        return lv.transpose(0, 3, 1, 4, 2).reshape(gh * p, gw * p, 3)
    except Exception:
        return None


def _to_u8(levels: np.ndarray) -> np.ndarray:
    return np.clip(np.nan_to_num(np.rint(levels), nan=0.0, posinf=255, neginf=0), 0, 255).astype(np.uint8)


def _scale_panel(img: Image.Image, factor: float) -> Image.Image:
    w, h = img.size
    return img.resize((max(1, round(w * factor)), max(1, round(h * factor))), Image.Resampling.NEAREST)


def diff_image(expected: PreprocessResult, actual: PreprocessResult, config: PreprocessConfig,
               index: int = 0) -> Image.Image | None:
    """Side by side: expected output, actual output, amplified |difference| (when shapes agree)."""
    exp = unpatchify(expected, index, config)
    act = unpatchify(actual, index, config)
    panels: list[tuple[str, Image.Image]] = []
    if exp is not None:
        panels.append(("expected", Image.fromarray(_to_u8(exp), "RGB")))
    if act is not None:
        panels.append(("actual", Image.fromarray(_to_u8(act), "RGB")))
    if exp is not None and act is not None and exp.shape == act.shape:
        d = np.abs(np.nan_to_num(act, nan=1e9, posinf=1e9, neginf=1e9) - exp).max(axis=2)
        peak = float(d.max())
        gain = 255.0 / peak if peak > 0 else 1.0
        amp = np.clip(np.rint(d * gain), 0, 255).astype(np.uint8)
        # Any difference at all shows up: a 1-ulp change would otherwise round to black.
        amp[(d > 0) & (amp == 0)] = 1
        heat = np.zeros(d.shape + (3,), dtype=np.uint8)
        heat[..., 0] = amp
        heat[..., 1] = np.where(d > 0, np.maximum(amp // 3, 40), 0)
        panels.append((f"|diff| x{gain:.3g} (max {peak:.3g})", Image.fromarray(heat, "RGB")))
    if not panels:
        return None
    factor = panel_scale(max(p.width for _, p in panels), max(p.height for _, p in panels))
    scaled = [(label, _scale_panel(p, factor)) for label, p in panels]
    gap, line_height = 12, 14
    draw = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    labels = [_wrap_label(draw, label, p.width) for label, p in scaled]
    header = line_height * max(len(lines) for lines in labels) + 4
    width = sum(p.width for _, p in scaled) + gap * (len(scaled) + 1)
    height = max(p.height for _, p in scaled) + header + 2 * gap
    canvas = Image.new("RGB", (width, height), (48, 48, 48))
    draw = ImageDraw.Draw(canvas)
    x = gap
    for lines, (_, p) in zip(labels, scaled):
        for i, text in enumerate(lines):  # each label stays within its own panel's width
            draw.text((x, gap // 2 + i * line_height), text, fill=(230, 230, 230))
        canvas.paste(p, (x, header + gap))
        x += p.width + gap
    return canvas


# Diff pictures: upscaled (nearest) so that a panel's short side is at least this many pixels, its
# long side at most the cap.
MIN_SHORT_SIDE = 256
MAX_LONG_SIDE = 2048


def panel_scale(width: int, height: int) -> float:
    """The nearest-neighbour scale of a panel: an integer ≥ 1 that brings the short side to at
    least MIN_SHORT_SIDE without the long side passing MAX_LONG_SIDE; below 1 for large panels."""
    short, long = max(1, min(width, height)), max(1, width, height)
    if long > MAX_LONG_SIDE:
        return MAX_LONG_SIDE / long
    up = -(-MIN_SHORT_SIDE // short)  # ceil
    return float(max(1, min(up, MAX_LONG_SIDE // long)))


def _wrap_label(draw: Any, text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        trial = f"{line} {word}".strip()
        if line and draw.textlength(trial) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return lines + [line] if line else lines or [""]


# ---------------------------------------------------------------------------------------------
# text reports


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def finding_lines(finding: Finding | Mapping[str, Any]) -> list[str]:
    """Plain-text lines describing a finding (used by Markdown, console and JUnit messages)."""
    if isinstance(finding, Finding):
        case = finding.case_dict()
        stats = finding.stats
    else:
        case = dict(finding)
        stats = case.get("stats", {})
    lines = [f"{case.get('group') or case['check']}: {case['message']}"]
    lines.append(f"candidate {case['candidate']} vs reference, tolerance {case['tolerance']}, "
                 f"profile {case.get('profile')}")
    from kimi_oracle.inputs.generators import CaseParams, config_label

    try:
        lines.append("config: " + config_label(PreprocessConfig.from_hf_json(case["config"])))
    except Exception:
        pass
    for img in case.get("images", []):
        params = img.get("params")
        label = CaseParams.from_dict(params).describe() if params else f"{img['size'][0]}x{img['size'][1]} {img['mode']}"
        src = f" ({img['source']})" if img.get("source") else ""
        lines.append(f"image {img['index']}: {label}{src}")
    if stats:
        if "max_level_diff" in stats:
            lines.append(
                f"values differing: {stats.get('differing')} of {stats.get('values')} "
                f"({100.0 * stats.get('share_differing', 0):.3g}%), failing the policy: {stats.get('failing')}; "
                f"max {_fmt(stats.get('max_level_diff'))} levels, mean {_fmt(stats.get('mean_level_diff'))}"
                + (f", max {stats['max_ulp']} ulp" if stats.get("max_ulp") is not None else "")
            )
            hist = stats.get("histogram")
            if hist:
                lines.append("level differences: " + ", ".join(f"{k}: {v}" for k, v in hist.items() if v))
            if stats.get("worst"):
                from kimi_oracle.oracle.checks import describe_location

                lines.append("worst: " + describe_location(stats["worst"]))
            for row in stats.get("per_image", []):
                if row.get("failing"):
                    lines.append(f"  image {row['image']} grid {tuple(row['grid_thw'])}: {row['failing']} failing, "
                                 f"max {_fmt(row['max_level_diff'])} levels")
        if "mismatched" in stats:
            for m in stats["mismatched"]:
                size = f" ({m['size'][0]}x{m['size'][1]})" if m.get("size") else ""
                lines.append(f"  image {m['image']}{size}: grid {tuple(m['actual'])}, expected {tuple(m['expected'])}")
        if "exception" in stats:
            lines.append(f"exception: {stats['exception']}")
        if "kind" in stats and case["check"] == INVARIANCE:
            lines.append(f"invariance: {stats['kind']} on images {stats.get('indices')} of a batch of {stats.get('batch_size')}")
    return lines


def finding_markdown(finding: Finding, *, directory: Path | None = None, has_diff: bool = False) -> str:
    """The finding's report.md."""
    case = finding.case_dict()
    out = [f"# {finding.extra.get('group') or finding.check}: {finding.id}", "", finding.message, ""]
    out += ["| | |", "|---|---|"]
    out.append(f"| candidate | `{finding.candidate}` |")
    out.append(f"| tolerance | `{finding.tolerance}` |")
    out.append(f"| engine | {finding.engine} (seed {finding.seed}, example {finding.example}) |")
    from kimi_oracle.inputs.generators import config_label

    out.append(f"| config | {finding.config.name}: {config_label(finding.config)} |")
    out.append(f"| versions | " + ", ".join(f"{k} {v}" for k, v in case["versions"].items() if v) + " |")
    out.append("")
    out.append("## Details")
    out.append("")
    out += [f"- {line}" for line in finding_lines(finding)[1:]]
    tb = finding.stats.get("traceback")
    if tb:
        out += ["", "```", tb.rstrip(), "```"]
    if has_diff:
        out += ["", "![expected | actual | amplified difference](diff.png)"]
    where = str(directory) if directory else "<finding dir>"
    out += ["", "## Reproduce", "", "```", f"kimi-oracle repro {where}", "```", ""]
    out += ["The config as the checkpoint's `preprocessor_config.json` keys:", "", "```json",
            json.dumps(finding.config.to_hf_json(), indent=2), "```", ""]
    return "\n".join(out)


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """Markdown for a run summary (as built by `fuzzing.FuzzRun.summary()`)."""
    out = [f"# kimi-oracle {summary.get('command', 'fuzz')}: candidate `{summary.get('candidate')}`", ""]
    out.append(f"- profile: {summary.get('profile')}; tolerance {summary.get('tolerance')}; "
               f"seed {summary.get('seed')}; config variation {'on' if summary.get('vary_config') else 'off'}")
    out.append(f"- examples: {summary.get('examples')} ({summary.get('rejected', 0)} rejected) in "
               f"{summary.get('elapsed_s', 0):.1f} s")
    findings = summary.get("findings", [])
    out.append(f"- findings: {len(findings)}")
    out.append("")
    out += root_cause_markdown(summary.get("root_causes") or root_cause_rows(findings))
    if findings:
        out += ["| id | check | message | found after |", "|---|---|---|---|"]
        for f in findings:
            msg = str(f.get("message", "")).replace("|", "\\|")
            out.append(f"| [{f['id']}]({f.get('path', '')}) | {f['check']} | {msg} | {f.get('example')} |")
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# root causes first: the table every report opens with


def finding_summary(f: Finding | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON entry of one finding in a run summary (fuzz, check, nightly, gate)."""
    if not isinstance(f, Finding):
        return dict(f)
    return {
        "id": f.id,
        "check": f.check,
        "kind": f.kind,
        "key": f.key,
        "group": f.extra.get("group") or f.key,
        "message": f.message,
        "root_causes": list(f.root_causes),
        "max_levels": f.max_levels,
        "mean_levels": f.mean_levels,
        "residual_max_levels": f.residual_max_levels,
        "residual_mean_levels": f.residual_mean_levels,
        "max_levels_seen": f.max_levels_seen if f.max_levels_seen is not None else f.max_levels,
        "hits": f.hits,
        "example": f.example,
        "path": str(f.path) if f.path else None,
        "images": list(f.params),
        "sources": list(f.sources),
    }


def root_cause_rows(findings: Iterable[Finding | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (root cause, mode class) over pixel findings, worst first: the largest and mean
    levels, how many examples hit it, whether it is float rounding only (under one level), and
    one repro folder with its picture. Other findings (grids, crashes, ...) get one row per key."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for f in findings:
        e = finding_summary(f)
        whole = e.get("max_levels_seen") if e.get("max_levels_seen") is not None else e.get("max_levels")
        for cause, mode, top, mean in cause_entries(e["check"], e.get("key"), e.get("root_causes"), cause_levels(f),
                                                    (whole, e.get("mean_levels"))):
            row = rows.setdefault((cause, mode), {
                "root_cause": cause, "mode_class": mode, "check": e["check"], "message": e.get("message", ""),
                "max_levels": None,
                "mean_levels": None, "hits": 0, "findings": 0, "float_rounding_only": True,
                "repro": None, "picture": None, "_best": -1.0, "_means": []})
            row["hits"] += int(e.get("hits") or 1)
            row["findings"] += 1
            if isinstance(top, (int, float)):
                row["max_levels"] = max(row["max_levels"] or 0.0, float(top))
                if not is_sub_level(top):
                    row["float_rounding_only"] = False
            else:
                row["float_rounding_only"] = e["check"] == PIXEL_MISMATCH and row["float_rounding_only"]
            if isinstance(mean, (int, float)):
                row["_means"].append(float(mean))
            if e["check"] != PIXEL_MISMATCH:
                row["float_rounding_only"] = False
            score = float(top) if isinstance(top, (int, float)) else 0.0
            if e.get("path") and score > row["_best"]:
                row["_best"] = score
                row["repro"] = e["path"]
                picture = Path(e["path"]) / "diff.png"
                row["picture"] = str(picture) if picture.is_file() else None
    out = []
    for row in rows.values():
        means = row.pop("_means")
        row.pop("_best")
        row["mean_levels"] = sum(means) / len(means) if means else None
        out.append(row)
    out.sort(key=lambda r: (r["float_rounding_only"], r["check"] != PIXEL_MISMATCH, -(r["max_levels"] or 0.0),
                            r["root_cause"], r["mode_class"]))
    return out


def cause_entries(check: str, key: str | None, root_causes: Sequence[str] | None,
                  levels: Mapping[str, tuple[Any, Any]], whole: tuple[Any, Any]) -> list[tuple[str, str, Any, Any]]:
    """The rows a failure counts under, the one rule of both tables (this module's
    `root_cause_rows` and the gate's `workflows.known.aggregate`): (root cause, mode class,
    max levels, mean levels). A pixel difference counts under each of its root causes with the
    levels that cause accounts for (`levels`, from `cause_levels`; `whole` for a cause without
    its own); any other failure, or a pixel difference without a cause, under its key (or its
    check when it has none). The mode class is the key's (`grouping.key_mode_class`)."""
    from kimi_oracle.oracle.grouping import key_mode_class

    key = key or check
    causes = list(root_causes or []) if check == PIXEL_MISMATCH else []
    mode = key_mode_class(key)
    return [(cause, mode, *levels.get(cause, whole)) for cause in causes or [key]]


def cause_levels(f: Finding | Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """The levels each root cause of a finding accounts for: how far the largest and the mean
    unexplained difference fell when the attribution applied it (docs/diagnosis.md). A cause
    that only removes float rounding accounts for less than one level even when it shares a
    finding with a 200-level one. The first cause is scaled to the run's largest difference."""
    attribution = f.attribution if isinstance(f, Finding) else f.get("attribution")
    if not isinstance(attribution, Mapping) or not attribution.get("explained"):
        return {}
    seen = f.max_levels_seen if isinstance(f, Finding) else f.get("max_levels_seen")
    out: dict[str, tuple[float, float]] = {}
    by_image: dict[Any, list[Mapping[str, Any]]] = {}
    for entry in attribution["explained"]:
        by_image.setdefault(entry.get("image"), []).append(entry)
    for entries in by_image.values():
        prev_max = float(attribution.get("max_levels") or 0.0)
        prev_mean = float(attribution.get("mean_levels") or 0.0)
        drops = []
        for entry in entries:
            rest_max = entry.get("residual_max_levels")
            rest_mean = entry.get("residual_mean_levels")
            rest_max = prev_max if rest_max is None else float(rest_max)
            rest_mean = prev_mean if rest_mean is None else float(rest_mean)
            drops.append([max(0.0, prev_max - rest_max), max(0.0, prev_mean - rest_mean)])
            prev_max, prev_mean = rest_max, rest_mean
        # A cause taken as the first of a pair (an enabling step such as palette-bicubic) lowers
        # the largest difference only together with the next: it shares that step's drop.
        for i in range(len(drops) - 2, -1, -1):
            if drops[i][0] == 0.0 and drops[i + 1][0] > 0.0:
                drops[i] = [drops[i + 1][0], max(drops[i][1], drops[i + 1][1])]
        if drops and isinstance(seen, (int, float)):
            scale = float(seen) / float(attribution.get("max_levels") or seen or 1.0)
            if scale > 1.0:  # the run saw a larger difference for this key than the shrunk case
                for d in drops:
                    if not is_sub_level(d[0]):
                        d[0] *= scale
        for entry, (top, mean) in zip(entries, drops):
            old = out.get(entry["root_cause"], (0.0, 0.0))
            out[entry["root_cause"]] = (max(old[0], top), max(old[1], mean))
    return out


def cause_meaning(root_cause: str) -> str:
    """The one-sentence meaning of a root-cause id (or of a check, for other findings)."""
    from kimi_oracle.oracle.diagnosis import MEANINGS

    if root_cause in MEANINGS:
        return MEANINGS[root_cause]
    check = root_cause.split("[")[0]
    if check in CHECK_MEANINGS:
        return CHECK_MEANINGS[check]
    return f"the oracle's {check} check failed"


# What a finding of a check other than pixel_mismatch means (pixel findings name root causes).
CHECK_MEANINGS = {
    ACCEPTS_INVALID: "the candidate returned a result for an input the checkpoint rejects (a failure only "
                       "under --strict)",
    GRID_MISMATCH: "the grids differ from the checkpoint's (\"deferred GPU preprocessing produced wrong grids\")",
    FEATURE_LENGTH: "the rows produced differ from the grids' patch count (\"deferred feature length does not "
                      "match image grids\")",
}


def _levels(v: Any) -> str:
    return "-" if v is None else f"{v:.3g}"


def root_cause_markdown(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The root-cause table (Markdown lines): real differences first, then float rounding only."""
    real = [r for r in rows if not r["float_rounding_only"]]
    noise = [r for r in rows if r["float_rounding_only"]]
    out: list[str] = []
    head = ["| root cause | meaning | mode class | max levels | mean levels | examples | repro | picture |",
            "|---|---|---|---|---|---|---|---|"]

    def line(r: Mapping[str, Any]) -> str:
        repro = f"[{Path(r['repro']).name}]({r['repro']})" if r.get("repro") else "-"
        pic = f"![diff]({r['picture']})" if r.get("picture") else "-"
        meaning = cause_meaning(r["root_cause"]).replace("|", "\\|")
        return (f"| `{r['root_cause']}` | {meaning} | {r['mode_class'] or '-'} | {_levels(r['max_levels'])} | "
                f"{_levels(r['mean_levels'])} | {r['hits']} | {repro} | {pic} |")

    if real:
        out += ["## Root causes", ""] + head + [line(r) for r in real] + [""]
    if noise:
        out += ["## Float rounding only (under one level)", ""] + head + [line(r) for r in noise] + [""]
    if not rows:
        out += ["## Root causes", "", "No finding.", ""]
    return out


def root_cause_junit(rows: Sequence[Mapping[str, Any]], classname: str) -> list[JUnitCase]:
    """One failed test case per root cause and mode class (listed before the per-check cases)."""
    cases = []
    for r in rows:
        label = f"{r['root_cause']}[{r['mode_class']}]" if r["mode_class"] else r["root_cause"]
        if r["check"] == PIXEL_MISMATCH:
            band = "float rounding only" if r["float_rounding_only"] else f"max {_levels(r['max_levels'])} levels"
            failure = f"{band}, mean {_levels(r['mean_levels'])}; {r['hits']} example(s)"
        else:
            failure = f"{r.get('message', '')}; {r['hits']} example(s)"
        cases.append(JUnitCase(f"root-cause {label}", classname, failure=failure,
                               details=f"{cause_meaning(r['root_cause'])}\nreproduce: kimi-oracle repro {r['repro']}"
                               if r.get("repro") else cause_meaning(r["root_cause"])))
    return cases


# ---------------------------------------------------------------------------------------------
# JUnit XML


@dataclass
class JUnitCase:
    """One <testcase>: a failure message (and text) when it failed, an error when it could not run."""

    name: str
    classname: str = "kimi-oracle"
    time: float = 0.0
    failure: str | None = None
    details: str = ""
    error: str | None = None
    skipped: str | None = None


def junit_xml(suite: str, cases: Sequence[JUnitCase], *, time: float = 0.0,
              properties: Mapping[str, Any] | None = None) -> str:
    """A JUnit XML document with one testsuite."""
    failures = sum(1 for c in cases if c.failure is not None)
    errors = sum(1 for c in cases if c.error is not None)
    skipped = sum(1 for c in cases if c.skipped is not None)
    def attr(value: Any) -> str:
        return quoteattr(xml_text(value))

    def body(value: Any) -> str:
        return escape(xml_text(value))

    lines = ['<?xml version="1.0" encoding="utf-8"?>',
             f"<testsuites name={attr(suite)} tests=\"{len(cases)}\" failures=\"{failures}\" "
             f"errors=\"{errors}\" time=\"{time:.3f}\">",
             f"  <testsuite name={attr(suite)} tests=\"{len(cases)}\" failures=\"{failures}\" "
             f"errors=\"{errors}\" skipped=\"{skipped}\" time=\"{time:.3f}\" timestamp={quoteattr(utc_now())}>"]
    if properties:
        lines.append("    <properties>")
        for k, v in properties.items():
            lines.append(f"      <property name={attr(k)} value={attr(v)}/>")
        lines.append("    </properties>")
    for c in cases:
        head = f"    <testcase classname={attr(c.classname)} name={attr(c.name)} time=\"{c.time:.3f}\""
        if c.failure is None and c.error is None and c.skipped is None:
            lines.append(head + "/>")
            continue
        lines.append(head + ">")
        if c.failure is not None:
            lines.append(f"      <failure message={attr(c.failure)} type={attr(c.name)}>{body(c.details)}</failure>")
        if c.error is not None:
            lines.append(f"      <error message={attr(c.error)}>{body(c.details)}</error>")
        if c.skipped is not None:
            lines.append(f"      <skipped message={attr(c.skipped)}/>")
        lines.append("    </testcase>")
    lines += ["  </testsuite>", "</testsuites>", ""]
    return "\n".join(lines)


def write_junit(path: str | os.PathLike, suite: str, cases: Sequence[JUnitCase], **kwargs: Any) -> Path:
    """Atomic JUnit XML file."""
    return atomic_write_text(path, junit_xml(suite, cases, **kwargs))


def junit_cases_for(findings: Iterable[Finding | Mapping[str, Any]], checks: Sequence[str], *,
                    classname: str = "kimi-oracle") -> list[JUnitCase]:
    """One test case per check class: failed when any finding has that check."""
    by_check: dict[str, list[Any]] = {c: [] for c in checks}
    for f in findings:
        check = f.check if isinstance(f, Finding) else f["check"]
        by_check.setdefault(check, []).append(f)
    cases = []
    for check, items in by_check.items():
        if not items:
            cases.append(JUnitCase(check, classname))
            continue
        blocks = []
        for f in items:
            text = "\n".join(finding_lines(f)) if isinstance(f, Finding) else "\n".join(
                [f"{f['check']}: {f['message']}"] + ([f"path: {f['path']}"] if f.get("path") else []))
            if isinstance(f, Finding) and f.path is not None:
                text += f"\nfinding: {f.path}\nreproduce: kimi-oracle repro {f.path}"
            blocks.append(text)
        first = items[0]
        message = first.message if isinstance(first, Finding) else first["message"]
        cases.append(JUnitCase(check, classname, failure=f"{len(items)} finding(s): {message}",
                               details="\n\n".join(blocks)))
    return cases


__all__ = [
    "Finding",
    "JUnitCase",
    "cause_levels",
    "cause_meaning",
    "finding_summary",
    "root_cause_junit",
    "root_cause_markdown",
    "root_cause_rows",
    "diff_image",
    "encode_input",
    "finding_lines",
    "finding_markdown",
    "junit_cases_for",
    "junit_xml",
    "load_input",
    "read_case",
    "summary_markdown",
    "unpatchify",
    "write_finding",
    "write_junit",
]
