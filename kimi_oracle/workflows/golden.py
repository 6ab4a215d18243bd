"""Golden files: recorded grids and pixel digests, their catalogue, check, regeneration and diffs.

Two kinds of golden file per profile (`k3`, `k25`, `k3-small`), JSON Lines, one object a line:

- `grids/<profile>.jsonl`: for every (W, H) of the size catalogue, what `plan()` gives (new size,
  padding, grid, tokens), sorted by (width, height) so that a review diff stays local;
- `pixels/<profile>.jsonl`: for every pixel case (generator parameters plus config overrides),
  the SHA-256 of the `pixel_values` bytes (float32, C order), the grid and a few statistics.

The first line of each file is `{"_meta": {...}}`: schema version, kind, profile, the profile's
config and its hash, generator version, entry count and the versions of the libraries used.

`check()` recomputes everything for the current catalogue (grids with `plan()`, pixels with a
candidate, the reference by default), compares entry by entry and writes, under an output folder
(`DEFAULT_OUT_DIR` in the current directory unless told otherwise; never inside the golden
directory, so an installed package is never written to), `<kind>/<profile>.jsonl.obtained` for
every file that differs and `golden-report.json` / `golden-report.md` naming the candidate and the
library versions. `regen()` does the same with the reference and replaces the goldens only when
asked, atomically, and only up to `max_changes` changed entries unless forced.

A candidate named by a spec string runs in its own process (`fuzzers.sandbox`), with a per-call
timeout and an optional memory limit: its crash, exit, hang or memory exhaustion on a case is
that case's `error` entry (so the case differs from its golden), never the end of the check.
Once it has hung on an image of a mode class (`P`, `RGBA+alpha`, ...), the remaining cases of
that class are not run again (each would cost a whole timeout) and are recorded as not run.
The reference (the default) and plain callables run in-process. An interrupt (Ctrl-C, SIGTERM)
still writes the report, which then says `stopped: interrupted`, and raises `CheckInterrupted`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from kimi_oracle.core import files as core_files
from kimi_oracle.core.files import read_text
from kimi_oracle.workflows import golden_manifest as manifest
from kimi_oracle.core.config import FILL_STAGES, PATTERNS, PROFILES, PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.core.errors import BackendError, CandidateError, InputError, KimiOracleError, PlanError
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle import candidates as oracle_candidates
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.oracle.checks import PIXEL_MISMATCH, TIMEOUT, shape_dtype_problems

SCHEMA_VERSION = 1
KINDS = ("grids", "pixels")
DEFAULT_MAX_CHANGES = 20
MAX_GOLDEN_BYTES = 64 << 20  # one golden file read (core.files.read_text): ours are under 1 MB
OBTAINED_SUFFIX = ".obtained"
DEFAULT_OUT_DIR = Path("kimi-oracle-out") / "golden"
REPORT_NAME = "golden-report"
# Pixel cases are grouped into one candidate call per config, at most this many images a call.
_BATCH_IMAGES = 48

# Sizes (W, H) of the small-limit matrix: all resample under k3-small (16 patches); tall ones
# make Pillow 13 run its vertical pass first, wide and square ones the horizontal pass.
RESAMPLE_SIZES = ((97, 73), (61, 150), (150, 61), (85, 85), (120, 47), (43, 130), (71, 99), (113, 88))
# Small sizes for the full-limit profiles (no resampling there: fill, pad, normalize, patchify).
SMALL_SIZES = ((1, 1), (13, 7), (29, 29), (37, 23), (56, 56), (57, 30), (100, 3), (3, 100))
# Cheap resampling under the full limits: the side cap binds (7200 -> 7168 px).
SIDE_CAP_SIZES = ((7200, 30), (30, 7200))
SIDE_CAP_MODES = ("RGB", "RGBA", "LA", "P", "L", "I;16")


class GoldenError(KimiOracleError):
    """A golden directory or file cannot be used (missing directory, unwritable, bad arguments)."""


class CheckInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a check; `report` says what was compared before it (its report
    files are written, saying `stopped: interrupted`)."""

    def __init__(self, report: "GoldenReport"):
        super().__init__("interrupted")
        self.report = report


# ---------------------------------------------------------------------------------------------
# versions, hashes, locations


# The golden metadata's names for the libraries whose behaviour the goldens record.
GOLDEN_LIBRARIES = {"kimi_oracle": "kimi-oracle", "pillow": "Pillow", "numpy": "numpy", "torch": "torch"}


def library_versions() -> dict[str, str | None]:
    """Versions of the libraries whose behaviour the goldens record (from `core.files.versions`)."""
    installed = core_files.versions()
    return {key: installed[name] for key, name in GOLDEN_LIBRARIES.items()}


def config_hash(config: PreprocessConfig) -> str:
    """SHA-256 of the config's canonical checkpoint JSON (sorted keys, no spaces)."""
    text = json.dumps(config.to_hf_json(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def package_golden_dir() -> Path:
    """The golden files shipped inside the package (`kimi_oracle/golden_data`)."""
    return Path(__file__).resolve().parents[1] / "golden_data"


def default_golden_dir() -> Path:
    """The repository's `golden/` when running from a checkout, else the packaged copy."""
    packaged = package_golden_dir()
    checkout = Path(__file__).resolve().parents[2] / "golden"
    with contextlib.suppress(OSError):
        if checkout.is_dir() and checkout.resolve() == packaged:
            return checkout
    return packaged


def golden_path(golden_dir: Path, kind: str, profile: str) -> Path:
    """`<dir>/<kind>/<profile>.jsonl`."""
    if kind not in KINDS:
        raise GoldenError(f"unknown golden kind {kind!r}; expected one of {', '.join(KINDS)}")
    return Path(golden_dir) / kind / f"{profile}.jsonl"


def obtained_path(out_dir: Path | str, kind: str, profile: str) -> Path:
    """`<out dir>/<kind>/<profile>.jsonl.obtained`: what a differing golden file would hold now."""
    return Path(out_dir) / kind / f"{profile}.jsonl{OBTAINED_SUFFIX}"


def default_out_dir() -> Path:
    """Where `check` and `regen` write by default: `kimi-oracle-out/golden` in the current directory."""
    return Path.cwd() / DEFAULT_OUT_DIR


# ---------------------------------------------------------------------------------------------
# catalogue


def _generators():
    # Imported lazily: generators.py is shared with the fuzzers and may grow heavy imports.
    from kimi_oracle.inputs import generators

    return generators


def grid_catalogue(profile: str) -> list[tuple[int, int, str]]:
    """(width, height, size_class) of the grid goldens of `profile`, sorted by (width, height)."""
    config = PreprocessConfig.profile(profile)
    return sorted(_generators().size_catalogue(config), key=lambda s: (s[0], s[1]))


@dataclass(frozen=True)
class PixelCase:
    """One pixel golden: an image (generator parameters) under `profile` with config overrides."""

    id: str
    profile: str
    params: Any  # generators.CaseParams
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def config(self) -> PreprocessConfig:
        """The profile's config with this case's overrides (`generators.vary_config` keywords)."""
        base = PreprocessConfig.profile(self.profile)
        if not self.overrides:
            return base
        return _generators().vary_config(base, **json.loads(json.dumps(dict(self.overrides))))

    def config_key(self) -> str:
        """Cases with equal keys run under the same config (one candidate call)."""
        return json.dumps(dict(self.overrides), sort_keys=True)

    def make_image(self):
        """A fresh PIL image for this case."""
        return _generators().make_image(self.params)

    def describe(self) -> str:
        """`id (37x5 RGBA checker noise seed 3)`."""
        return f"{self.id} ({self.params.describe()})"

    @classmethod
    def from_entry(cls, profile: str, entry: Mapping[str, Any]) -> "PixelCase":
        """The case a recorded pixel entry describes."""
        params = _generators().CaseParams.from_dict(entry["params"])
        return cls(str(entry["id"]), profile, params, dict(entry.get("overrides") or {}))


def _pick(case_id: str, salt: str, options: Sequence[Any]) -> Any:
    # Derived from the case's id, not its position: adding a mode or a pattern adds entries
    # without changing the images of the existing ones.
    digest = hashlib.sha256(f"{salt}:{case_id}".encode()).digest()
    return options[int.from_bytes(digest[:8], "big") % len(options)]


def _case(profile: str, case_id: str, mode: str, alpha: str, sizes: Sequence[tuple[int, int]],
          overrides: Mapping[str, Any] | None = None, content: str | None = None) -> PixelCase:
    gen = _generators()
    w, h = _pick(case_id, "size", sizes)
    params = gen.CaseParams(
        width=w,
        height=h,
        mode=mode,
        alpha=alpha,
        content=content or _pick(case_id, "content", gen.CONTENTS),
        seed=_pick(case_id, "seed", range(10000)),
    )
    return PixelCase(case_id, profile, params, dict(overrides or {}))


def _mode_alpha_pairs() -> list[tuple[str, str]]:
    gen = _generators()
    return [(mode, alpha) for mode in gen.MODES for alpha in gen.alpha_patterns_for(mode)]


def pixel_catalogue(profile: str) -> list[PixelCase]:
    """The pixel cases of `profile`, in file order.

    k3-small (and any profile with a background whose limit forces resampling): one case per
    mode × alpha pattern × fill stage × background pattern. k3 and k25: one case per mode ×
    alpha pattern at the profile's own config (small, not resampled), plus side-cap cases that
    do resample cheaply, and for k25 one image over the patch budget.
    """
    PreprocessConfig.profile(profile)  # validates the name
    cases: list[PixelCase] = []
    if profile == "k3-small":
        for stage in FILL_STAGES:
            for pattern in PATTERNS:
                overrides = {"transparent_bg_fill_stage": stage, "background": {"pattern": pattern}}
                for mode, alpha in _mode_alpha_pairs():
                    cid = f"{mode}/{alpha}/{stage}/{pattern}"
                    cases.append(_case(profile, cid, mode, alpha, RESAMPLE_SIZES, overrides))
    else:
        for mode, alpha in _mode_alpha_pairs():
            cases.append(_case(profile, f"{mode}/{alpha}", mode, alpha, SMALL_SIZES))
        gen = _generators()
        for mode in SIDE_CAP_MODES:
            alphas = gen.alpha_patterns_for(mode)
            alpha = "checker" if "checker" in alphas else alphas[-1]
            cases.append(_case(profile, f"side_cap/{mode}/{alpha}", mode, alpha, SIDE_CAP_SIZES,
                               content="gradient"))
        if profile == "k25":
            # 2000x1800: 142 x 128 = 18176 floored patches > 16384, so the budget binds.
            cases.append(_case(profile, "budget/RGB/opaque", "RGB", "opaque", [(2000, 1800)],
                               content="gradient"))
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "pixel case ids must be unique"
    return cases


# ---------------------------------------------------------------------------------------------
# entries


def grid_entry(width: int, height: int, size_class: str, config: PreprocessConfig) -> dict[str, Any]:
    """The golden record of one size: plan fields, or the checkpoint's error."""
    entry: dict[str, Any] = {"width": int(width), "height": int(height), "class": size_class}
    try:
        p = plan(width, height, config)
    except PlanError as exc:
        entry["error"] = f"PlanError: {exc}"
        return entry
    entry.update(
        new_w=p.new_w,
        new_h=p.new_h,
        pad_w=p.pad_w,
        pad_h=p.pad_h,
        grid_thw=list(p.grid_thw),
        num_tokens=p.num_tokens,
    )
    return entry


def _pixel_stats(values: np.ndarray) -> dict[str, Any]:
    flat = values.reshape(-1)
    stats: dict[str, Any] = {"patches": int(values.shape[0]) if values.ndim else 0, "dtype": str(values.dtype)}
    if flat.size and np.issubdtype(values.dtype, np.number):
        stats["min"] = float(flat.min())
        stats["max"] = float(flat.max())
        # float64 accumulation, rounded: stable across summation orders.
        stats["mean"] = round(float(flat.mean(dtype=np.float64)), 6)
    return stats


def digest(pixel_values: Any) -> str:
    """SHA-256 of the tensor's bytes in C order (float32 for every conforming pipeline)."""
    return hashlib.sha256(_to_numpy(pixel_values).tobytes()).hexdigest()


def _to_numpy(values: Any) -> np.ndarray:
    try:
        import torch

        if isinstance(values, torch.Tensor):
            values = values.detach().cpu().contiguous().numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return np.ascontiguousarray(np.asarray(values))


def pixel_entry(case: PixelCase, result: PreprocessResult | BaseException) -> dict[str, Any]:
    """The golden record of one pixel case from a one-image result (or the error it raised)."""
    entry: dict[str, Any] = {
        "id": case.id,
        "params": case.params.to_dict(),
        "overrides": dict(case.overrides),
    }
    if isinstance(result, BaseException):
        entry["error"] = _error_text(result)
        return entry
    values = _to_numpy(result.pixel_values)
    grids = _to_numpy(result.grid_thws).reshape(-1, 3).tolist()
    # One image, one row; anything else is recorded as is so that the diff shows it.
    entry["grid_thw"] = [int(v) for v in grids[0]] if len(grids) == 1 else grids
    entry["sha256"] = hashlib.sha256(values.tobytes()).hexdigest()
    entry["stats"] = _pixel_stats(values)
    return entry


def _error_text(exc: BaseException) -> str:
    # kimi_oracle.oracle.candidates wraps a candidate's own exception (CandidateCrash): record the
    # original, so that a candidate rejecting an input exactly as the reference does matches.
    name = getattr(exc, "exc_type", None) or type(exc).__name__
    text = str(getattr(exc, "exc_message", None) or exc).strip()
    return f"{name}: {text}" if text else name


# ---------------------------------------------------------------------------------------------
# candidates


def _is_reference(spec: Any) -> bool:
    return spec is None or (isinstance(spec, str) and spec.strip() == "reference")


def open_candidate(spec: str | Callable | None, *, case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
                   memory_limit_mb: int | None = None) -> tuple[str, Candidate, Callable[[], None]]:
    """(label, candidate, close) for `spec`: a spec string other than the reference is started in
    its own process (`sandbox.IsolatedCandidate`; CandidateError when it cannot be loaded) and
    `close` stops it; the reference, Candidate objects and plain callables run in-process."""
    if isinstance(spec, str) and not _is_reference(spec):
        from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

        isolated = IsolatedCandidate(spec, timeout_s=case_timeout_s, memory_limit_mb=memory_limit_mb)
        isolated.start()
        return isolated.spec, isolated, isolated.close
    label, fn = load_candidate(spec)
    return label, fn, lambda: None


def load_candidate(spec: str | Callable | None) -> tuple[str, Candidate]:
    """(label, candidate) for a spec (`None` is the reference) or a plain callable, loaded and
    wrapped by `kimi_oracle.oracle.candidates` like in every other command (in-process: see
    `open_candidate` for a spec that runs in its own process)."""
    if callable(spec) and not isinstance(spec, Candidate):
        label = getattr(spec, "__name__", None) or type(spec).__name__
        return label, Candidate(label, spec)
    if isinstance(spec, Candidate):
        return spec.spec, spec
    loaded = oracle_candidates.load_candidate(spec or "reference")
    return loaded.spec, loaded


class ShapeDtypeError(CandidateError):
    """The candidate's result has the wrong shape or dtype (the oracle's `shape_dtype` check)."""


def _checked(result: PreprocessResult, config: PreprocessConfig) -> PreprocessResult:
    # The same shape/dtype rule as the oracle: int32 grids or float64 pixels are not accepted.
    problems = shape_dtype_problems(result, config)
    if problems:
        raise ShapeDtypeError("; ".join(problems))
    return result


def _split(result: PreprocessResult, count: int) -> list[PreprocessResult] | None:
    if result.num_images != count:
        return None
    offsets = result.patch_offsets()
    if result.pixel_values.ndim == 0 or offsets[-1] != int(result.pixel_values.shape[0]):
        return None
    return [result.image(i) for i in range(count)]


def run_pixel_cases(cases: Sequence[PixelCase], candidate: Candidate,
                    hung: dict[str, str] | None = None) -> list[PreprocessResult | BaseException]:
    """Run `candidate` on every case; one call per config group, per image when a batch fails.

    A batch whose grids do not account for its rows, or that raises, is rerun image by image,
    so that every case gets its own result or its own error. `hung` (mode class -> the case the
    candidate timed out on) is filled as timeouts happen and may be shared between calls: a
    case of a mode class in it is not run again, its error says so.
    """
    with warnings.catch_warnings():
        # Pillow warns about palette transparency given as bytes on every such image.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\..*")
        return _run_pixel_cases(cases, candidate, {} if hung is None else hung)


class NotRunAfterTimeout(Exception):
    """A case not run: the candidate already timed out on an image of the same mode class."""


def _mode_class(img: Any) -> str:
    from kimi_oracle.oracle.grouping import mode_class

    return mode_class(img)


def _run_pixel_cases(cases: Sequence[PixelCase], candidate: Candidate,
                     hung: dict[str, str]) -> list[PreprocessResult | BaseException]:
    results: list[PreprocessResult | BaseException | None] = [None] * len(cases)
    groups: dict[str, list[int]] = {}
    for index, case in enumerate(cases):
        groups.setdefault(case.config_key(), []).append(index)
    for indices in groups.values():
        for start in range(0, len(indices), _BATCH_IMAGES):
            chunk = indices[start : start + _BATCH_IMAGES]
            config = cases[chunk[0]].config()
            images = [cases[i].make_image() for i in chunk]
            parts = None
            if not any(_mode_class(img) in hung for img in images):
                try:
                    parts = _split(_checked(candidate(images, config), config), len(chunk))
                except (KeyboardInterrupt, SystemExit):
                    raise
                except Exception:
                    parts = None
            if parts is None:
                for i, img in zip(chunk, images):
                    results[i] = _run_one(cases[i], candidate, config, img, hung)
            else:
                for i, part in zip(chunk, parts):
                    results[i] = part
    return [r for r in results if r is not None]


def _run_one(case: PixelCase, candidate: Candidate, config: PreprocessConfig, img: Any = None,
             hung: dict[str, str] | None = None) -> PreprocessResult | BaseException:
    img = case.make_image() if img is None else img
    cls = _mode_class(img)
    if hung is not None and cls in hung:
        return NotRunAfterTimeout(f"not run: the candidate already timed out on a {cls} image ({hung[cls]})")
    try:
        return _checked(candidate([img], config), config)
    except ShapeDtypeError as exc:  # the candidate's fault on this case: its golden entry differs
        return exc
    except (KeyboardInterrupt, SystemExit, CandidateError, BackendError):
        # A broken candidate (bad return type, no backend) is a harness error, not a finding.
        raise
    except Exception as exc:  # its crash, death or timeout on this case: the case's error entry
        if hung is not None and getattr(exc, "check", None) == TIMEOUT:
            hung.setdefault(cls, case.id)
        return exc


# ---------------------------------------------------------------------------------------------
# golden files: record, serialize, parse


@dataclass
class GoldenFile:
    """A golden file's metadata and entries (in file order)."""

    kind: str
    profile: str
    meta: dict[str, Any]
    entries: list[dict[str, Any]]

    def key(self, entry: Mapping[str, Any]) -> str:
        """The identity of an entry: `WxH` for grids, the case id for pixels."""
        return entry_key(self.kind, entry)

    def by_key(self) -> dict[str, dict[str, Any]]:
        """Entries by key."""
        return {self.key(e): e for e in self.entries}

    def dumps(self) -> str:
        """The file's text: the metadata line, then one compact JSON object per entry."""
        meta = dict(self.meta, count=len(self.entries))
        lines = [json.dumps({"_meta": meta}, separators=(", ", ": "))]
        lines += [json.dumps(e, separators=(",", ":")) for e in self.entries]
        return "\n".join(lines) + "\n"


def entry_key(kind: str, entry: Mapping[str, Any]) -> str:
    """`WxH` for a grid entry, the case id for a pixel entry."""
    if kind == "grids":
        return f"{entry.get('width')}x{entry.get('height')}"
    return str(entry.get("id"))


def _meta(kind: str, profile: str) -> dict[str, Any]:
    config = PreprocessConfig.profile(profile)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "profile": profile,
        "config_sha256": config_hash(config),
        "config": config.to_hf_json(),
        "generator_version": _generators().GENERATOR_VERSION,
        "versions": library_versions(),
    }


def record_grids(profile: str) -> GoldenFile:
    """The grid golden of `profile`, computed now with `plan()`."""
    config = PreprocessConfig.profile(profile)
    entries = [grid_entry(w, h, cls, config) for w, h, cls in grid_catalogue(profile)]
    return GoldenFile("grids", profile, _meta("grids", profile), entries)


CaseFilter = Callable[[PixelCase], bool]


def record_pixels(profile: str, candidate: str | Callable | None = None,
                  select: CaseFilter | None = None, hung: dict[str, str] | None = None) -> GoldenFile:
    """The pixel golden of `profile`, computed now with `candidate` (default the reference).

    `select` keeps only some cases (a partial recording, for quick checks); `hung` as in
    `run_pixel_cases`.
    """
    _, fn = load_candidate(candidate)
    cases = pixel_catalogue(profile)
    if select is not None:
        cases = [c for c in cases if select(c)]
    results = run_pixel_cases(cases, fn, hung)
    entries = [pixel_entry(c, r) for c, r in zip(cases, results)]
    return GoldenFile("pixels", profile, _meta("pixels", profile), entries)


def record(kind: str, profile: str, candidate: str | Callable | None = None) -> GoldenFile:
    """Record one golden file now."""
    if kind == "grids":
        return record_grids(profile)
    if kind == "pixels":
        return record_pixels(profile, candidate)
    raise GoldenError(f"unknown golden kind {kind!r}; expected one of {', '.join(KINDS)}")


class GoldenFormatError(ValueError):
    """A golden file is not what `GoldenFile.dumps` writes (line number in the message)."""


def parse(text: str, kind: str, profile: str) -> GoldenFile:
    """Parse a golden file's text; raise GoldenFormatError naming the bad line."""
    lines = text.split("\n")
    if not text.endswith("\n"):
        raise GoldenFormatError("file does not end with a newline (truncated?)")
    lines = lines[:-1]
    if not lines:
        raise GoldenFormatError("empty file")
    try:
        head = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise GoldenFormatError(f"line 1: not JSON: {exc.msg}") from None
    meta = head.get("_meta") if isinstance(head, dict) else None
    if not isinstance(meta, dict):
        raise GoldenFormatError('line 1: expected the metadata object {"_meta": {...}}')
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise GoldenFormatError(
            f"line 1: schema_version {meta.get('schema_version')!r}, this kimi-oracle reads {SCHEMA_VERSION}"
        )
    if meta.get("kind") != kind or meta.get("profile") != profile:
        raise GoldenFormatError(
            f"line 1: metadata says kind {meta.get('kind')!r}, profile {meta.get('profile')!r}; "
            f"expected {kind!r}, {profile!r}"
        )
    entries: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GoldenFormatError(f"line {number}: not JSON: {exc.msg}") from None
        if not isinstance(entry, dict):
            raise GoldenFormatError(f"line {number}: expected a JSON object")
        key = entry_key(kind, entry)
        if key in seen:
            raise GoldenFormatError(f"line {number}: duplicate entry {key} (first on line {seen[key]})")
        seen[key] = number
        entries.append(entry)
    if meta.get("count") != len(entries):
        raise GoldenFormatError(f"metadata count {meta.get('count')!r} but {len(entries)} entries (truncated?)")
    meta = {k: v for k, v in meta.items() if k != "count"}
    return GoldenFile(kind, profile, meta, entries)


def load(path: Path, kind: str, profile: str) -> GoldenFile:
    """Read and parse one golden file."""
    return parse(read_text(path, max_bytes=MAX_GOLDEN_BYTES), kind, profile)  # (core.files: capped, regular)


def remove_stale_temporaries(golden_dir: Path) -> list[Path]:
    """Delete temporary files a killed writer left in the golden folders."""
    return [p for kind in KINDS for p in core_files.remove_stale_temporaries(Path(golden_dir) / kind)]


# ---------------------------------------------------------------------------------------------
# diffs and reports


@dataclass
class EntryChange:
    """One entry that differs: `changed` (both sides), `added` (new only), `removed` (old only)."""

    kind: str
    key: str
    change: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    # For a changed pixel case run by a candidate: oracle.diagnosis.finding_diagnosis of its
    # output against the reference (root_causes, max/mean levels, residual), without attribution.
    diagnosis: dict[str, Any] | None = None

    def describe(self) -> str:
        """One readable line."""
        if self.kind == "grids":
            return _describe_grid(self)
        text = _describe_pixels(self)
        d = self.diagnosis
        if d and d.get("root_causes"):
            top = d.get("max_levels")
            text += (f"; root causes: {', '.join(d['root_causes'])}"
                     + (f" (max {top:.3g} levels)" if isinstance(top, (int, float)) else ""))
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {"key": self.key, "change": self.change, "old": self.old, "new": self.new}
        if self.diagnosis is not None:
            out["diagnosis"] = self.diagnosis
        return out


def _grid_text(entry: Mapping[str, Any] | None) -> str:
    if entry is None:
        return "-"
    if "error" in entry:
        return f"error ({entry['error']})"
    grid = entry.get("grid_thw")
    grid_s = "x".join(str(v) for v in grid) if isinstance(grid, list) and all(isinstance(v, int) for v in grid) else str(grid)
    return f"grid {grid_s}, {_tokens(entry.get('num_tokens'))}"


def _tokens(n: Any) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _size_text(entry: Mapping[str, Any]) -> str:
    return f"{entry.get('new_w')}x{entry.get('new_h')} +{entry.get('pad_w')}+{entry.get('pad_h')}"


def _describe_grid(c: EntryChange) -> str:
    ref = c.new if c.new is not None else c.old or {}
    label = f"{c.key} [{ref.get('class', '?')}]"
    if c.change == "added":
        return f"+ {label}: not in the golden file; now {_grid_text(c.new)}"
    if c.change == "removed":
        return f"- {label}: in the golden file ({_grid_text(c.old)}) but not in the catalogue"
    old, new = c.old or {}, c.new or {}
    parts = [f"{_grid_text(old)} -> {_grid_text(new)}"]
    if "error" not in old and "error" not in new:
        if _size_text(old) != _size_text(new):
            parts.append(f"resize+pad {_size_text(old)} -> {_size_text(new)}")
    other = sorted(k for k in set(old) | set(new)
                   if k not in ("new_w", "new_h", "pad_w", "pad_h", "grid_thw", "num_tokens", "error")
                   and old.get(k) != new.get(k))
    parts += [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in other]
    if _grid_text(old) == _grid_text(new) and len(parts) == 1:
        parts[0] = f"{_grid_text(new)} (grid unchanged)"
    return f"~ {label}: " + "; ".join(parts)


def _pixel_grid_text(entry: Mapping[str, Any]) -> str:
    grid = entry.get("grid_thw")
    if isinstance(grid, list) and len(grid) == 3 and all(isinstance(v, int) for v in grid):
        t, h, w = grid
        # Patch rows, not tokens: a pixel entry does not say the merge size (t·h·w // 4 assumed 2).
        return f"grid {t}x{h}x{w}, {t * h * w} patch{'' if t * h * w == 1 else 'es'}"
    return f"grid {grid!r}"


def _case_label(entry: Mapping[str, Any]) -> str:
    params = entry.get("params") or {}
    try:
        text = _generators().CaseParams.from_dict(params).describe()
    except Exception:
        text = json.dumps(params)
    return text


def _describe_pixels(c: EntryChange) -> str:
    ref = c.new if c.new is not None else c.old or {}
    label = f"{c.key} ({_case_label(ref)})"
    if c.change == "added":
        what = f"error ({c.new['error']})" if "error" in (c.new or {}) else _pixel_grid_text(c.new or {})
        return f"+ {label}: not in the golden file; now {what}"
    if c.change == "removed":
        return f"- {label}: in the golden file but not in the catalogue"
    old, new = c.old or {}, c.new or {}
    parts = []
    if "error" in old or "error" in new:
        parts.append(f"{old.get('error', 'ok')} -> {new.get('error', 'ok')}".replace("\n", " "))
    if old.get("sha256") != new.get("sha256") and "error" not in old and "error" not in new:
        parts.append(f"digest changed {str(old.get('sha256'))[:12]} -> {str(new.get('sha256'))[:12]}")
    og, ng = _pixel_grid_text(old), _pixel_grid_text(new)
    if "error" not in old and "error" not in new:
        parts.append(f"{og} -> {ng}" if og != ng else f"{ng} (unchanged)")
    os_, ns = old.get("stats") or {}, new.get("stats") or {}
    for k in sorted(set(os_) | set(ns)):
        if os_.get(k) != ns.get(k):
            parts.append(f"{k} {os_.get(k)!r} -> {ns.get(k)!r}")
    for k in ("params", "overrides"):
        if old.get(k) != new.get(k):
            parts.append(f"{k} {json.dumps(old.get(k), sort_keys=True)} -> {json.dumps(new.get(k), sort_keys=True)}")
    return f"~ {label}: " + "; ".join(parts)


def diff_entries(kind: str, old: GoldenFile | None, new: GoldenFile) -> list[EntryChange]:
    """Entry-level differences, in the new file's order, then removed entries in the old order."""
    old_map = old.by_key() if old is not None else {}
    new_map = new.by_key()
    changes: list[EntryChange] = []
    for key, entry in new_map.items():
        if key not in old_map:
            changes.append(EntryChange(kind, key, "added", None, entry))
        elif old_map[key] != entry:
            changes.append(EntryChange(kind, key, "changed", old_map[key], entry))
    for key, entry in old_map.items():
        if key not in new_map:
            changes.append(EntryChange(kind, key, "removed", entry, None))
    return changes


@dataclass
class FileReport:
    """The comparison of one golden file with what is obtained now."""

    kind: str
    profile: str
    path: Path
    changes: list[EntryChange] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # failures not tied to one entry
    notes: list[str] = field(default_factory=list)  # informational (versions)
    obtained: Path | None = None  # the .obtained file written, if any
    accepted: bool = False
    recorded_pillow: str | None = None
    new_text: str | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """True when the file matches exactly."""
        return not self.changes and not self.problems

    def counts(self) -> dict[str, int]:
        """Number of changed, added and removed entries."""
        out = {"changed": 0, "added": 0, "removed": 0}
        for c in self.changes:
            out[c.change] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "kind": self.kind,
            "profile": self.profile,
            "path": str(self.path),
            "ok": self.ok,
            "counts": self.counts(),
            "problems": list(self.problems),
            "notes": list(self.notes),
            "obtained": str(self.obtained) if self.obtained else None,
            "accepted": self.accepted,
            "changes": [c.to_dict() for c in self.changes],
        }


@dataclass
class GoldenReport:
    """The result of a check or a regeneration over several golden files."""

    candidate: str
    golden_dir: Path
    command: str = "check"
    files: list[FileReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # printed first (Pillow mismatch)
    messages: list[str] = field(default_factory=list)  # printed last (refusals, acceptance)
    stopped: str = "done"  # or "interrupted": `files` holds only the files compared before it
    timed_out: dict[str, str] = field(default_factory=dict)  # mode class -> the case the candidate hung on
    planned: int = 0  # files the check was to compare

    @property
    def ok(self) -> bool:
        """True when every file matches (never after an interrupt)."""
        return self.stopped != "interrupted" and all(f.ok for f in self.files)

    @property
    def num_changes(self) -> int:
        """Changed + added + removed entries over all files."""
        return sum(len(f.changes) for f in self.files)

    def failing(self) -> list[FileReport]:
        """The files that differ."""
        return [f for f in self.files if not f.ok]

    def render(self, max_lines: int = 40) -> str:
        """The readable report: warnings first, one block per differing file, then a summary."""
        out: list[str] = [f"WARNING: {w}" for w in self.warnings]
        for f in self.files:
            name = _display(f.path)
            if f.ok:
                out.append(f"ok   {name} ({f.kind}, {f.profile})")
                continue
            counts = f.counts()
            summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
            status = "ACCEPTED" if f.accepted else "FAIL"
            out.append(f"{status} {name} ({f.kind}, {f.profile}): {summary or 'metadata differs'}")
            for problem in f.problems:
                out.append(f"  ! {problem}")
            shown = 0 if "missing golden file" in f.problems else max_lines
            for c in f.changes[:shown]:
                out.append(f"  {c.describe()}")
            if len(f.changes) > shown:
                where = "the golden file now" if f.accepted else "the .obtained file"
                out.append(f"  ... and {len(f.changes) - shown} more (see {where})")
            if f.obtained is not None:
                out.append(f"  obtained: {_display(f.obtained)}")
        for f in self.files:
            for note in f.notes:
                out.append(f"note: {_display(f.path)}: {note}")
        out.extend(self.messages)
        failing = self.failing()
        if self.stopped == "interrupted":
            out.append(f"golden {self.candidate}: INTERRUPTED after {len(self.files)} of "
                       f"{self.planned or len(self.files)} files ({len(failing)} differ so far): not a pass")
        elif failing and all(f.accepted for f in failing):
            out.append(f"golden {self.candidate}: {len(failing)} of {len(self.files)} files replaced, "
                       f"{self.num_changes} entries")
        elif failing:
            out.append(f"golden {self.candidate}: {len(failing)} of {len(self.files)} files differ, "
                       f"{self.num_changes} entries")
        else:
            out.append(f"golden {self.candidate}: all {len(self.files)} files match")
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for the gate's report)."""
        return {
            "candidate": self.candidate,
            "golden_dir": str(self.golden_dir),
            "ok": self.ok,
            "stopped": self.stopped,
            "files_planned": self.planned or len(self.files),
            "num_changes": self.num_changes,
            "warnings": list(self.warnings),
            "messages": list(self.messages),
            "files": [f.to_dict() for f in self.files],
        }


def _display(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(Path(path).relative_to(Path.cwd()))
    return str(path)


# ---------------------------------------------------------------------------------------------
# check and regen


def _compare(kind: str, profile: str, path: Path, new: GoldenFile,
             partial: bool = False, data: bytes | None | str = "read") -> tuple[FileReport, GoldenFile | None]:
    """`data`: the golden file's bytes as read before the candidate ran (None: missing); by default
    the file is read now."""
    report = FileReport(kind, profile, path, new_text=new.dumps())
    if data is None or (data == "read" and not path.exists()):
        report.problems.append("missing golden file")
        report.changes = diff_entries(kind, None, new)
        return report, None
    try:
        old = load(path, kind, profile) if data == "read" else parse(bytes(data).decode("utf-8"), kind, profile)
    except GoldenFormatError as exc:
        report.problems.append(f"unreadable golden file: {exc}")
        return report, None
    except (OSError, UnicodeDecodeError, InputError) as exc:
        report.problems.append(f"unreadable golden file: {_error_text(exc)}")
        return report, None
    report.recorded_pillow = (old.meta.get("versions") or {}).get("pillow")
    if old.meta.get("config_sha256") != new.meta["config_sha256"]:
        report.problems.append(
            f"profile {profile!r} config changed since recording: config_sha256 "
            f"{str(old.meta.get('config_sha256'))[:12]} -> {new.meta['config_sha256'][:12]}"
        )
    if old.meta.get("generator_version") != new.meta["generator_version"]:
        report.notes.append(
            f"recorded with generator version {old.meta.get('generator_version')}, "
            f"now {new.meta['generator_version']}: generator changes alter the catalogue and images"
        )
    old_versions = old.meta.get("versions") or {}
    for lib, now in new.meta["versions"].items():
        was = old_versions.get(lib)
        if was != now and lib != "pillow":
            report.notes.append(f"recorded with {lib} {was}, running {now}")
    if partial:
        # Only the selected cases were computed: compare those, ignore the rest of the file.
        wanted = set(new.by_key())
        old = GoldenFile(old.kind, old.profile, old.meta, [e for e in old.entries if old.key(e) in wanted])
    report.changes = diff_entries(kind, old, new)
    return report, old


def _selection(kinds: Iterable[str] | None, profiles: Iterable[str] | None) -> list[tuple[str, str]]:
    kinds = list(kinds) if kinds else list(KINDS)
    profiles = list(profiles) if profiles else list(PROFILES)
    for k in kinds:
        if k not in KINDS:
            raise GoldenError(f"unknown golden kind {k!r}; expected one of {', '.join(KINDS)}")
    for p in profiles:
        if p not in PROFILES:
            raise GoldenError(f"unknown profile {p!r}; expected one of {', '.join(PROFILES)}")
    return [(k, p) for k in kinds for p in profiles]


def _pillow_warning(files: list[FileReport]) -> list[str]:
    import PIL

    recorded = sorted({f.recorded_pillow for f in files if f.recorded_pillow and f.recorded_pillow != PIL.__version__})
    if not recorded:
        return []
    return [f"the golden files were recorded with Pillow {', '.join(recorded)}, the installed Pillow is "
            f"{PIL.__version__}: pixel digests can differ because of Pillow itself, not the pipeline"]


def _write_obtained(report: FileReport, out_dir: Path, messages: list[str]) -> None:
    target = obtained_path(out_dir, report.kind, report.profile)
    if report.ok:
        # A stale .obtained from an earlier run no longer describes anything.
        with contextlib.suppress(FileNotFoundError, OSError):
            target.unlink()
        return
    try:
        core_files.atomic_write_text(target, report.new_text or "")
        report.obtained = target
    except OSError as exc:
        messages.append(f"could not write {_display(target)}: {_error_text(exc)}")


def _check_out_dir(out_dir: Path | str | None, golden_dir: Path) -> Path:
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    with contextlib.suppress(OSError):
        if out.resolve() == golden_dir.resolve() or golden_dir.resolve() in out.resolve().parents:
            raise GoldenError(f"the output folder {out} is inside the golden directory {golden_dir}: "
                              "choose another --out")
    return out


def write_report(report: "GoldenReport", out_dir: Path) -> None:
    """`golden-report.json` and `.md` under `out_dir`: the candidate, versions, every file's result."""
    data = {"schema": "kimi-oracle.golden-report", "schema_version": 1, "command": report.command,
            "created": core_files.utc_now(), "versions": core_files.versions(), **report.to_dict()}
    try:
        core_files.atomic_write_many({out_dir / f"{REPORT_NAME}.json": core_files.to_json(data),
                                      out_dir / f"{REPORT_NAME}.md": _report_markdown(report)})
    except OSError as exc:
        report.messages.append(f"could not write the report under {_display(out_dir)}: {_error_text(exc)}")


def _report_markdown(report: "GoldenReport") -> str:
    versions = core_files.versions()
    head = [f"# kimi-oracle golden {report.command}: candidate `{report.candidate}`", "",
            f"- golden directory: `{report.golden_dir}`",
            "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v), "", "```"]
    return "\n".join(head + [report.render(max_lines=10_000), "```", ""])


def _compute(kind: str, profile: str, candidate: str | Callable | None, select: CaseFilter | None = None,
             hung: dict[str, str] | None = None) -> GoldenFile:
    if kind == "pixels":
        return record_pixels(profile, candidate, select, hung)
    return record(kind, profile, candidate)


def check(
    golden_dir: Path | str | None = None,
    candidate: str | Callable | None = None,
    *,
    kinds: Iterable[str] | None = None,
    profiles: Iterable[str] | None = None,
    write_obtained: bool = True,
    select: CaseFilter | None = None,
    out_dir: Path | str | None = None,
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
    memory_limit_mb: int | None = None,
    diagnose: bool = True,
) -> GoldenReport:
    """Recompute the goldens (grids with `plan()`, pixels with `candidate`) and compare.

    When `write_obtained`, writes under `out_dir` (default `default_out_dir()`) one `.obtained`
    file per differing golden file and the report files; nothing is ever written into the golden
    directory. `select` restricts the pixel cases (a partial check, which writes nothing).

    A spec string other than the reference runs in its own process (`open_candidate`), each call
    bounded by `case_timeout_s` and its address space by `memory_limit_mb`. Ctrl-C / SIGTERM
    raise `CheckInterrupted` once the report of what was compared is written.
    """
    gdir = Path(golden_dir) if golden_dir is not None else default_golden_dir()
    if not gdir.is_dir():
        raise GoldenError(f"golden directory {gdir} does not exist")
    out = _check_out_dir(out_dir, gdir) if write_obtained and select is None else None
    selection = _selection(kinds, profiles)
    # Every golden file read and hashed before any candidate runs (golden_manifest): the check
    # compares with these bytes, checked against the manifest `golden regen --accept` wrote.
    contents = manifest.read_goldens(gdir, [manifest.relative_name(k, p) for k, p in selection])
    integrity = manifest.verify(gdir, contents)
    close: Callable[[], None] = lambda: None
    if any(kind == "pixels" for kind, _ in selection):
        label, fn, close = open_candidate(candidate, case_timeout_s=case_timeout_s, memory_limit_mb=memory_limit_mb)
    else:  # grids do not run a candidate
        label, fn = (candidate if isinstance(candidate, str) else "reference"), None
    report = GoldenReport(label, gdir, command="check", planned=len(selection))
    hung: dict[str, str] = {}  # mode classes the candidate timed out on, over all profiles
    try:
        for kind, profile in selection:
            partial = select is not None and kind == "pixels"
            new = _compute(kind, profile, fn if kind == "pixels" else None, select, hung)
            name = manifest.relative_name(kind, profile)
            file_report, _ = _compare(kind, profile, golden_path(gdir, kind, profile), new, partial, contents[name])
            if name in integrity:
                file_report.problems.append(integrity[name])
            if diagnose and kind == "pixels" and fn is not None and label != "reference":
                _diagnose_changes(file_report, profile, fn)
            report.files.append(file_report)
            if out is not None:
                _write_obtained(file_report, out, report.messages)
    except KeyboardInterrupt:
        close()
        report.stopped = "interrupted"
        report.messages.append(f"interrupted: {len(report.files)} of {len(selection)} golden files compared")
        report.warnings = _pillow_warning(report.files)
        if out is not None:
            write_report(report, out)
        raise CheckInterrupted(report) from None
    finally:
        close()
        _rewritten(report, gdir, contents)
    report.timed_out = dict(hung)
    if hung:
        report.messages.append("timed out on " + ", ".join(f"a {cls} image ({case})" for cls, case in hung.items())
                               + ": the other cases of those mode classes were not run")
    report.warnings = _pillow_warning(report.files)
    if out is not None:
        write_report(report, out)
    return report


# ---------------------------------------------------------------------------------------------
# planners: every recorded grid of every profile


def planner_golden_report(planner: str | Any, golden_dir: Path | str | None = None,
                          profiles: Iterable[str] | None = None) -> Any:
    """Judge a planner (`oracle.planner`) on every entry of the grid goldens of `profiles`
    (default all), in this process: each recorded plan must come back field for field; an entry
    the checkpoint rejects (its `error`) is reported, not failed. A missing or unreadable grid
    file is an error line of the report."""
    from kimi_oracle.oracle.planner import PlannerReport, check_sizes, load_planner, plan_from_entry

    loaded = load_planner(planner) if isinstance(planner, str) else planner
    gdir = Path(golden_dir) if golden_dir is not None else default_golden_dir()
    report = PlannerReport(loaded.spec)
    for profile in _selection(("grids",), profiles):
        name = profile[1]
        config = PreprocessConfig.profile(name)
        path = golden_path(gdir, "grids", name)
        try:
            golden = load(path, "grids", name)
        except (OSError, UnicodeDecodeError, InputError, GoldenFormatError) as exc:
            report.errors.append(f"{_display(path)}: unreadable grid golden: {_error_text(exc)}")
            continue

        def entries(golden: GoldenFile = golden, config: PreprocessConfig = config) -> Iterable[tuple]:
            for e in golden.entries:
                expected = PlanError(str(e["error"])) if "error" in e else plan_from_entry(e)
                yield int(e["width"]), int(e["height"]), config, expected

        check_sizes(loaded, entries(), report, source=f"golden:{name}")
    return report


def check_planner(planner: str, *, golden_dir: Path | str | None = None, profiles: Iterable[str] | None = None,
                  fuzz_sizes: int = 0, config: PreprocessConfig | None = None, seed: int = 0,
                  vary_config: bool = True, case_timeout_s: float | None = DEFAULT_CASE_TIMEOUT_S,
                  budget_s: float | None = None) -> Any:
    """A planner against the grid goldens (and, with `fuzz_sizes`, on that many fuzzed sizes and
    configs around `config`, default k3), in a separate process: the gate's and `golden check
    --planner`'s entry point. Returns an `oracle.planner.PlannerReport` (`ok`, `lines()`,
    `to_dict()`); CandidateError (exit 2) when the planner cannot be loaded or returns no plan.
    Each planner call is bounded by `case_timeout_s`, the whole check by `budget_s` (None: none)."""
    import time

    from kimi_oracle.fuzzers.planner_fuzz import fuzz_planner, run_isolated

    deadline = time.monotonic() + budget_s if budget_s is not None else None

    def left() -> float | None:
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    report = run_isolated(planner_golden_report, planner, golden_dir, tuple(profiles) if profiles else None,
                          planner=planner, case_timeout_s=case_timeout_s, budget_s=left())
    if fuzz_sizes > 0 and not report.errors and report.stopped != "budget":
        report.merge(run_isolated(fuzz_planner, planner, config or PreprocessConfig.profile("k3"), planner=planner,
                                  case_timeout_s=case_timeout_s, budget_s=left(), sizes=fuzz_sizes, seed=seed,
                                  vary_config=vary_config))
    return report


# Differing pixel cases diagnosed per golden file (each costs a reference run, a candidate call and
# an attribution of a few milliseconds); the rest keep their digest line only.
MAX_DIAGNOSED = 200


def _diagnose_changes(report: "FileReport", profile: str, candidate: Callable) -> None:
    """Re-run each changed pixel case with the reference and the candidate and name its root
    causes (oracle.diagnosis), so a golden difference says why, not only that a digest moved."""
    from kimi_oracle.oracle.checks import compare
    from kimi_oracle.oracle.diagnosis import finding_diagnosis
    from kimi_oracle.pipelines import reference

    done = 0
    for change in report.changes:
        if done >= MAX_DIAGNOSED:
            break
        old, new = change.old or {}, change.new or {}
        if change.change != "changed" or "error" in old or "error" in new:
            continue
        try:
            case = PixelCase.from_entry(profile, new)
            img, config = case.make_image(), case.config()
            expected = reference.preprocess([img], config)
            verdict = compare(expected, candidate([img], config), config, "exact", sizes=[img.size])
        except Exception:  # noqa: BLE001 - a case that no longer runs (or crashes now) keeps its digest line
            continue
        if verdict.check != PIXEL_MISMATCH:
            continue
        fields = finding_diagnosis(str(verdict.check), verdict.stats, [img], config,
                                   expected=verdict.expected, actual=verdict.actual)
        fields.pop("attribution", None)
        change.diagnosis = fields
        done += 1


def _rewritten(report: "GoldenReport", gdir: Path, contents: Mapping[str, bytes | None]) -> None:
    """A golden file that changed while the candidate ran fails, named (its check used the bytes
    read before)."""
    changed = manifest.changed_since(gdir, contents)
    for f in report.files:
        problem = changed.get(manifest.relative_name(f.kind, f.profile))
        if problem is not None:
            f.problems.append(problem)
    for name in changed:
        report.messages.append(f"error: {changed[name]}")


def check_pixels(
    candidate: str | Callable | None = None,
    golden_dir: Path | str | None = None,
    *,
    profiles: Iterable[str] | None = None,
    write_obtained: bool = False,
    select: CaseFilter | None = None,
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
    memory_limit_mb: int | None = None,
    diagnose: bool = True,
) -> GoldenReport:
    """The pixel goldens of every profile (small-limit included) run with `candidate`.

    The gate's entry point: by default it writes nothing (no `.obtained` files). The report's
    `files[i].changes` name each differing case; `PixelCase.from_entry(profile, change.new or
    change.old)` rebuilds its image and config (for diff images).
    """
    return check(golden_dir, candidate, kinds=("pixels",), profiles=profiles,
                 write_obtained=write_obtained, select=select, case_timeout_s=case_timeout_s,
                 memory_limit_mb=memory_limit_mb, diagnose=diagnose)


def regen(
    golden_dir: Path | str | None = None,
    *,
    accept: bool = False,
    max_changes: int = DEFAULT_MAX_CHANGES,
    force: bool = False,
    kinds: Iterable[str] | None = None,
    profiles: Iterable[str] | None = None,
    out_dir: Path | str | None = None,
) -> GoldenReport:
    """Record the goldens anew with the reference; write `.obtained` files for the differing ones
    (under `out_dir`, default `default_out_dir()`) and the report files.

    Only with `accept` are the goldens replaced (atomically, all files staged before any is
    renamed), and only if at most `max_changes` entries changed overall, unless `force`.
    """
    if max_changes < 0:
        raise GoldenError(f"--max-changes must be >= 0, got {max_changes}")
    gdir = Path(golden_dir) if golden_dir is not None else default_golden_dir()
    if gdir.exists() and not gdir.is_dir():
        raise GoldenError(f"golden directory {gdir} is not a directory")
    out = _check_out_dir(out_dir, gdir)
    remove_stale_temporaries(gdir)
    report = GoldenReport("reference", gdir, command="regen")
    for kind, profile in _selection(kinds, profiles):
        new = _compute(kind, profile, None)
        file_report, _ = _compare(kind, profile, golden_path(gdir, kind, profile), new)
        report.files.append(file_report)
        _write_obtained(file_report, out, report.messages)
    report.warnings = _pillow_warning(report.files)
    try:
        _accept(report, accept=accept, max_changes=max_changes, force=force)
    finally:
        write_report(report, out)
    return report


def _manifest_file(gdir: Path, replaced: Sequence[FileReport]) -> dict[Path, str]:
    """The manifest (golden_manifest) of the golden directory once `replaced` are written."""
    new = {manifest.relative_name(f.kind, f.profile): f.new_text or "" for f in replaced}
    return {Path(gdir) / manifest.MANIFEST_NAME: manifest.manifest_text(Path(gdir), new)}


def _accept(report: GoldenReport, *, accept: bool, max_changes: int, force: bool) -> None:
    failing = report.failing()
    if accept and not failing:
        # Nothing to replace: the manifest is (re)written when it does not match the files.
        files = _manifest_file(report.golden_dir, [])
        path, text = next(iter(files.items()))
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current != text:
            core_files.atomic_write_many(files)
            report.messages.append(f"accepted: {_display(path)} written (the golden files' SHA-256)")
        return
    if not accept or not failing:
        return
    total = report.num_changes
    unreadable = [f for f in failing if f.problems and not f.changes]
    if unreadable and not force:
        # An unreadable or missing file has no entries to count: replacing it would rewrite the
        # whole file without anyone reviewing it, so it always needs --force.
        report.messages.append(
            "refused: " + ", ".join(_display(f.path) for f in unreadable) + " could not be compared entry "
            "by entry (" + "; ".join(f.problems[0] for f in unreadable) + "); review the .obtained "
            "files, then rerun with --force"
        )
        return
    if total > max_changes and not force:
        report.messages.append(
            f"refused: {total} changed entries is more than --max-changes {max_changes}; review the "
            f".obtained files, then rerun with a larger --max-changes or with --force"
        )
        return
    core_files.atomic_write_many({**{f.path: f.new_text or "" for f in failing},
                                  **_manifest_file(report.golden_dir, failing)})
    for f in failing:
        f.accepted = True
        if f.obtained is not None:
            with contextlib.suppress(OSError):
                f.obtained.unlink()
            f.obtained = None
    report.messages.append(
        f"accepted: {len(failing)} golden files replaced ({total} entries): "
        + ", ".join(_display(f.path) for f in failing)
    )


__all__ = [
    "CheckInterrupted",
    "DEFAULT_CASE_TIMEOUT_S",
    "DEFAULT_MAX_CHANGES",
    "EntryChange",
    "FileReport",
    "GoldenError",
    "GoldenFile",
    "GoldenFormatError",
    "GoldenReport",
    "KINDS",
    "PixelCase",
    "SCHEMA_VERSION",
    "check",
    "check_pixels",
    "check_planner",
    "config_hash",
    "default_golden_dir",
    "default_out_dir",
    "diff_entries",
    "digest",
    "golden_path",
    "grid_catalogue",
    "grid_entry",
    "library_versions",
    "load",
    "load_candidate",
    "NotRunAfterTimeout",
    "obtained_path",
    "open_candidate",
    "package_golden_dir",
    "parse",
    "pixel_catalogue",
    "pixel_entry",
    "planner_golden_report",
    "record",
    "record_grids",
    "record_pixels",
    "regen",
    "run_pixel_cases",
]
