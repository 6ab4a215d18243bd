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
from kimi_oracle.core.images import RAW_MAGIC, decode, default_max_pixels, pack_raw, read_file, unpack_raw
from kimi_oracle.core.files import atomic_write_text, fsync_dir, to_json, utc_now, versions
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.core.text import xml_text

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
    transparency: PNG when it round-trips, else TIFF, else a raw container (`.kimiraw`)."""
    params: dict[str, Any] = {}
    if "transparency" in img.info:
        params["transparency"] = img.info["transparency"]
    for ext, fmt in (("png", "PNG"), ("tiff", "TIFF")):
        buf = io.BytesIO()
        try:
            img.save(buf, fmt, **params)
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
            diff.save(tmp / "diff.png")
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
    try:
        case = json.loads(read_file(case_file, max_bytes=MAX_CASE_BYTES).decode("utf-8"))
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
    tallest = max(p.height for _, p in panels)
    widest = max(p.width for _, p in panels)
    factor = 1.0
    if max(tallest, widest) < 160:
        factor = float(min(16, max(1, 160 // max(tallest, widest, 1))))
    elif max(tallest, widest) > 1200:
        factor = 1200.0 / max(tallest, widest)
    scaled = [(label, _scale_panel(p, factor)) for label, p in panels]
    gap, header = 8, 14
    width = sum(p.width for _, p in scaled) + gap * (len(scaled) + 1)
    height = max(p.height for _, p in scaled) + header + 2 * gap
    canvas = Image.new("RGB", (max(width, 200), height), (48, 48, 48))
    draw = ImageDraw.Draw(canvas)
    x = gap
    for label, p in scaled:
        draw.text((x, 2), label, fill=(230, 230, 230))
        canvas.paste(p, (x, header + gap))
        x += p.width + gap
    return canvas


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
        if "kind" in stats and case["check"] == "invariance":
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
    if findings:
        out += ["| id | check | message | found after |", "|---|---|---|---|"]
        for f in findings:
            msg = str(f.get("message", "")).replace("|", "\\|")
            out.append(f"| [{f['id']}]({f.get('path', '')}) | {f['check']} | {msg} | {f.get('example')} |")
        out.append("")
    return "\n".join(out)


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
