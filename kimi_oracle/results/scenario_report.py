"""Scenario findings on disk and in reports: folders with lossless images and `scenario.json`.

A folder `OUT/findings/<check>-<digest>/` holds `scenario.json` (the engine, the seed and example,
the scenario: configs, image parameters, requests with their prompts, paths and configs, dp_size
and encode calls, and every failed check with its request, image and rank), one lossless image
per table entry (`image-<k>.png`, or `.tiff` for modes PNG cannot store) and `report.md`. It is
written to a temporary name and renamed; `read_scenario` validates an untrusted one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from PIL import Image

from kimi_oracle.core.errors import InputError, WriteError
from kimi_oracle.core.files import fsync_dir, load_json, read_file, to_json, versions
from kimi_oracle.core.images import lossless_bytes, open_encoded
from kimi_oracle.core.specs import absolute_spec
from kimi_oracle.core.text import safe_text
from kimi_oracle.results.report import JUnitCase

if TYPE_CHECKING:  # (imported where a scenario is built: it brings torch, ~1.5 s, after the checks)
    from kimi_oracle.inputs.scenarios import Scenario

SCENARIO_FILE = "scenario.json"
_PNG = b"\x89PNG"


@dataclass
class ScenarioFinding:
    """A shrunk failing scenario: its first check, and every failed check on it."""

    check: str
    message: str
    scenario: Scenario
    findings: list[dict[str, Any]]
    engine: str
    seed: int | None = None
    example: int | None = None
    original_requests: int | None = None
    path: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """`<check>-<10 hex digits of the scenario>`."""
        digest = hashlib.sha1(json.dumps(self.scenario.to_dict(), sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.check}-{digest}"

    def to_dict(self, files: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
        """The `scenario.json` document."""
        # (a file spec made absolute: a replay from anywhere loads what this run loaded)
        return {"kind": "scenario", "check": self.check, "message": self.message, "engine": absolute_spec(self.engine),
                "seed": self.seed, "example": self.example, "original_requests": self.original_requests,
                "scenario": self.scenario.to_dict(), "findings": self.findings, "image_files": list(files),
                "versions": versions(), **self.extra}

    def lines(self) -> list[str]:
        """The finding for a terminal: the check, each failed check's place, the scenario."""
        out = [f"{self.check}: {self.message}"]
        for f in self.findings[1:6]:
            where = " ".join(f"{k} {f[k]}" for k in ("request", "image", "rank") if f.get(k) is not None)
            out.append(f"also {f['check']}{' at ' + where if where else ''}: {f['message']}")
        out += self.scenario.describe()
        if self.path is not None:
            out.append(f"reproduce: kimi-oracle repro {self.path}")
        return [safe_text(line) for line in out]


def write_scenario_finding(out_dir: str | os.PathLike, finding: ScenarioFinding, images: Sequence[Image.Image]) -> Path:
    """Write `out_dir/findings/<id>/` atomically (an existing one is kept)."""
    root = Path(out_dir) / "findings"
    root.mkdir(parents=True, exist_ok=True)
    final = root / finding.id
    if final.exists():
        finding.path = final
        return final
    tmp = Path(tempfile.mkdtemp(prefix=f".{finding.id}.", dir=root))
    try:
        files = []
        for k, img in enumerate(images):
            data = lossless_bytes(img)
            name = f"image-{k}." + ("png" if data.startswith(_PNG) else "tiff")
            (tmp / name).write_bytes(data)
            files.append({"file": name, "sha256": hashlib.sha256(data).hexdigest()})
        finding.path = final
        (tmp / SCENARIO_FILE).write_text(to_json(finding.to_dict(files)), encoding="utf-8")
        (tmp / "report.md").write_text(scenario_markdown(finding), encoding="utf-8", errors="backslashreplace")
        for child in tmp.iterdir():
            with open(child, "rb") as fh:
                os.fsync(fh.fileno())
        try:
            os.rename(tmp, final)
            fsync_dir(root)
        except OSError:
            if not final.exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:  # (a full disk, the file-size limit: one line naming the finding)
        shutil.rmtree(tmp, ignore_errors=True)
        raise exc if isinstance(exc, WriteError) else WriteError(str(final), exc) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


# Bounds on an untrusted scenario folder (a fuzzed scenario holds at most 8 requests of 6 images,
# sides of 40, texts of a few characters): far above what a run writes, far below what would take
# a replay's time or memory. Items are the images of all requests (one image may recur).
MAX_SCENARIO_BYTES = 4 << 20
MAX_SCENARIO_REQUESTS = 256
MAX_SCENARIO_IMAGES = 256
MAX_SCENARIO_CONFIGS = 64
MAX_SCENARIO_ITEMS = 1024
MAX_REQUEST_TEXT = 4096
MAX_IMAGE_BYTES = 16 << 20
MAX_IMAGE_PIXELS = 4096 * 4096
MAX_TOTAL_PIXELS = 4 * 4096 * 4096


def _too_many(what: str, count: int, cap: int, doc_path: Path) -> InputError:
    return InputError(f"scenario.json: {count} {what}, more than the {cap} a scenario finding may hold",
                      source=str(doc_path))


def _bounded(doc: Any, doc_path: Path) -> dict[str, Any]:
    # The counts a replay would build, refused past the bounds before anything is built.
    scen = doc.get("scenario") if isinstance(doc, dict) else None
    if not isinstance(scen, dict):
        raise InputError("not a scenario finding: no scenario object", source=str(doc_path))
    for key, cap in (("requests", MAX_SCENARIO_REQUESTS), ("images", MAX_SCENARIO_IMAGES),
                     ("configs", MAX_SCENARIO_CONFIGS), ("cuts", MAX_SCENARIO_ITEMS)):
        items = scen.get(key, [])
        if not isinstance(items, list):
            raise InputError(f"not a scenario finding: scenario.{key} is not a list", source=str(doc_path))
        if len(items) > cap:
            raise _too_many(key, len(items), cap, doc_path)
    requests = [r if isinstance(r, dict) else {} for r in scen.get("requests", [])]
    lists = [r.get(k) if isinstance(r.get(k), list) else [] for r in requests for k in ("images", "texts")]
    count = sum(len(r["images"]) for r in requests if isinstance(r.get("images"), list))
    if count > MAX_SCENARIO_ITEMS:
        raise _too_many("images over all requests", count, MAX_SCENARIO_ITEMS, doc_path)
    if any(len(x) > MAX_SCENARIO_ITEMS + 1 for x in lists):
        raise _too_many("images or texts in one request", max(map(len, lists)), MAX_SCENARIO_ITEMS, doc_path)
    for r, req in enumerate(requests):
        texts = req.get("texts") if isinstance(req.get("texts"), list) else []
        size = sum(len(t) for t in texts if isinstance(t, str))
        if size > MAX_REQUEST_TEXT:
            raise InputError(f"scenario.json: request {r} has {size} characters of text, more than the "
                             f"{MAX_REQUEST_TEXT} a scenario finding may hold", source=str(doc_path))
    return scen


def _item_pixels(scen: Mapping[str, Any], pixels: Sequence[int], doc_path: Path) -> None:
    # What a replay preprocesses: each request's images (one image may recur), bounded in all.
    total = 0
    for req in scen.get("requests", []):
        for k in req.get("images", []) if isinstance(req, dict) else []:
            total += pixels[k] if isinstance(k, int) and 0 <= k < len(pixels) else 0
    if total > MAX_TOTAL_PIXELS:
        raise InputError(f"scenario.json: its requests' images hold {total} pixels, more than the "
                         f"{MAX_TOTAL_PIXELS} a scenario finding may hold", source=str(doc_path))


def _read_images(entries: Any, count: int, directory: Path, doc_path: Path) -> list[Image.Image]:
    # Plain names inside the folder, regular files (capped), their recorded SHA-256, bounded pixels.
    if not isinstance(entries, list) or len(entries) != count:
        raise InputError("scenario.json: image_files do not match the scenario's images", source=str(doc_path))
    images, total = [], 0
    for entry in entries:
        name = str(entry.get("file", "")) if isinstance(entry, dict) else ""
        if not name or Path(name).name != name or name.startswith("."):
            raise InputError(f"scenario.json: bad image file name {name!r}", source=str(doc_path))
        data = read_file(directory / name, max_bytes=MAX_IMAGE_BYTES, name=str(directory / name))
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise InputError(f"{name}: its SHA-256 is not the recorded one", source=str(doc_path))
        img = open_encoded(data, name=name, max_pixels=MAX_IMAGE_PIXELS)
        total += img.width * img.height
        if total > MAX_TOTAL_PIXELS:
            raise InputError(f"scenario.json: its images hold more than {MAX_TOTAL_PIXELS} pixels",
                             source=str(doc_path))
        images.append(img)
    return images


def read_scenario(path: str | os.PathLike) -> tuple[dict[str, Any], Scenario, list[Image.Image], Path]:
    """An untrusted finding folder (or its scenario.json): the document, the scenario and its
    images (plain names inside the folder, their recorded SHA-256); InputError otherwise. Read as
    case folders are (`core.files`: regular files only, capped, nesting bounded), its counts, text
    and pixels bounded (`MAX_SCENARIO_*`, `MAX_REQUEST_TEXT`, `MAX_*_PIXELS`), all before a
    scenario is built."""
    p = Path(path)
    directory = p if p.is_dir() else p.parent
    doc_path = directory / SCENARIO_FILE
    try:
        doc = load_json(doc_path, max_bytes=MAX_SCENARIO_BYTES)
        scen = _bounded(doc, doc_path)
    except InputError as exc:
        if exc.reason.startswith(("scenario.json", "not a scenario")):
            raise
        raise InputError(f"not a scenario finding: {exc.reason}", source=str(doc_path)) from None
    images = _read_images(doc.get("image_files"), len(scen.get("images") or []), directory, doc_path)
    _item_pixels(scen, [img.width * img.height for img in images], doc_path)
    from kimi_oracle.inputs.scenarios import Scenario

    try:
        scenario = Scenario.from_dict(scen)
    except InputError as exc:
        raise InputError(f"not a scenario finding: {exc.reason}", source=str(doc_path)) from None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise InputError(f"not a scenario finding: {type(exc).__name__}: {exc}", source=str(doc_path)) from None
    return doc, scenario, images, directory


def scenario_markdown(finding: ScenarioFinding) -> str:
    """`report.md` of a scenario finding."""
    lines = [f"# {finding.check}: engine `{finding.engine}`", "", finding.message, "",
             f"Seed {finding.seed}, example {finding.example}; shrunk from {finding.original_requests} request(s).", "",
             "## Failed checks", "", "| check | request | image | rank | message |", "|---|---|---|---|---|"]
    for f in finding.findings:
        cells = [f["check"], *(str(f.get(k)) if f.get(k) is not None else "" for k in ("request", "image", "rank")),
                 f["message"].replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Scenario", "", "```", *finding.scenario.describe(), "```", ""]
    if finding.path is not None:
        lines += [f"Reproduce: `kimi-oracle repro {finding.path}`", ""]
    return safe_text("\n".join(lines))


def scenario_summary_markdown(spec: str, summary: Mapping[str, Any], findings: Sequence[ScenarioFinding]) -> str:
    """A run's Markdown summary."""
    lines = [f"# kimi-oracle fuzz --engine {spec}", "",
             f"{summary.get('examples')} scenarios, seed {summary.get('seed')}: {len(findings)} finding(s).", ""]
    for f in findings:
        lines += [f"## {f.check}", "", *[f"    {line}" for line in f.lines()], ""]
    return safe_text("\n".join(lines))


def scenario_junit_cases(findings: Sequence[ScenarioFinding], checks: Sequence[str]) -> list[JUnitCase]:
    """One test case per request check: failed when a finding's first check is it."""
    cases = []
    for check in checks:
        mine = [f for f in findings if f.check == check]
        if not mine:
            cases.append(JUnitCase(check, "kimi-oracle.engine"))
            continue
        cases.append(JUnitCase(check, "kimi-oracle.engine", failure=f"{len(mine)} finding(s): {mine[0].message}",
                               details="\n\n".join("\n".join(f.lines()) for f in mine)))
    return cases


__all__ = ["SCENARIO_FILE", "ScenarioFinding", "read_scenario", "scenario_junit_cases", "scenario_markdown",
           "scenario_summary_markdown", "write_scenario_finding"]
