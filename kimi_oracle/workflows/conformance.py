"""`kimi-oracle conformance`: every adapted path of the built-in engines judged against the
reference, in one report (`DIR/conformance.json`, `conformance.md` and `conformance.html`, which
open with the matrix of root causes x engine paths and the list of real defects:
`workflows.conformance_summary`).

For each engine spec (`sglang`, `transformers@5.23.0`, ...) and each of its paths that is adapted
(`adapters.engines.ENGINES`), the parts below run as this package's own commands, each in its
own process (an engine's modules never meet another's, and a crash or hang ends one part only),
each writing its own findings under `DIR/<engine>/<part>/` with a repro folder per finding:

- planner: `golden check --planner` (every recorded grid) and `fuzz --planner` (fuzzed sizes
  and configurations);
- image path: `fuzz --candidate` (root cause x mode class with levels, the inferred pipeline),
  `golden check --kind pixels`, and `check --corpus` files when given;
- request layer: `fuzz --engine` without and with `--mixed-configs`.

Paths an engine has but this package has not adapted yet are listed as such. Exit 0 when every
part ran and found nothing, 1 when a part made findings, 2 when an engine could not be loaded or a
part ended in a harness error (its log is named).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_oracle.core.errors import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, KimiOracleError
from kimi_oracle.core.files import atomic_write_text, versions

SCHEMA = "kimi-oracle.conformance"
SCHEMA_VERSION = 1
# The profile each engine path serves (SGLang's paths are K3's, transformers' processor K2.5's,
# vLLM's fused processor K2.5's and its K3 processor K3's); an engine's entry names its default
# path's (the path named as the engine).
# Video candidate paths that take images and chunks in one call (`--media both` is passed on);
# the others (transformers' Kimi_K25VideoProcessor) take chunks only: `--media video`.
MIXED_VIDEO_PATHS = ("vllm",)
PATH_PROFILES = {"sglang": "k3", "sglang-cpu": "k3", "transformers": "k25", "vllm": "k25", "vllm-k3": "k3",
                 "paddleformers": "k25", "mlx-vlm": "k25", "mlx-vlm-k3": "k3", "lmdeploy": "k25"}


@dataclass
class ConformanceOptions:
    engines: tuple[str, ...]
    out: Path
    examples: int = 300
    planner_sizes: int = 20_000
    scenarios: int = 200
    corpus: Path | None = None
    seed: int = 1
    part_timeout_s: float = 1800.0
    parts: tuple[str, ...] = ()  # only these parts (PART_NAMES); empty: all
    media: str = "image"  # video/both: the engines' video paths too (video-fuzz, video-planner-fuzz)

    def command(self) -> str:
        """The command line that makes this report."""
        words = ["kimi-oracle conformance --engines", ",".join(self.engines), "--out", str(self.out),
                 "--examples", str(self.examples), "--planner-sizes", str(self.planner_sizes),
                 "--scenarios", str(self.scenarios), "--seed", str(self.seed)]
        if self.corpus is not None:
            words += ["--corpus", str(self.corpus)]
        if self.parts:
            words += ["--parts", ",".join(self.parts)]
        if self.media != "image":
            words += ["--media", self.media]
        return " ".join(words)


@dataclass
class Part:
    name: str  # planner-goldens, planner-fuzz, image-fuzz, image-goldens, image-corpus, requests, ...
    role: str  # planner, candidate, request engine
    spec: str
    args: list[str]
    json_path: Path | None
    out: Path
    profile: str = ""


def _with_source(path_name: str, source: str | None) -> str:
    return f"{path_name}@{source}" if source else path_name


def plan_parts(spec: str, options: ConformanceOptions) -> tuple[dict[str, Any], list[Part]]:
    """The engine's entry (name, version, where it loads from, paths not adapted) and its parts."""
    from kimi_oracle.adapters.engines import ENGINES, load_tree
    from kimi_oracle.adapters.sources import split_engine_spec

    name, source = split_engine_spec(spec)
    engine = ENGINES.get(name)
    if engine is None:
        raise KimiOracleError(f"conformance: unknown engine {name!r} (built-in: {', '.join(ENGINES)})")
    entry: dict[str, Any] = {"engine": name, "spec": spec, "profile": PATH_PROFILES.get(name, "k3"),
                             "known_versions": list(engine.known), "parts": [], "not_adapted": []}
    if not any(p.adapted for p in engine.paths):  # nothing to run: listed, not loaded
        entry["not_adapted"] = [{"path": p.name, "role": p.role, "file": p.file, "function": p.function}
                                for p in engine.paths]
        entry.update(version=None, loads_from=None)
        return entry, []
    try:
        _, _, tree = load_tree(spec)
        entry.update(version=tree.version, loads_from=str(tree.root), origin=tree.origin)
    except KimiOracleError as exc:
        entry.update(version=None, loads_from=None, error=str(exc))
        return entry, []
    root = options.out / (name if source is None else f"{name}@{source}".replace("/", "_"))
    entry["lacks"] = engine.lacks
    every: list[Part] = []
    for path in engine.paths:
        if path.role.startswith("video") and options.media == "image":
            continue  # (--media image: the video paths are not asked for)
        if not path.adapted:
            entry["not_adapted"].append({"path": path.name, "role": path.role, "file": path.file,
                                         "function": path.function})
            continue
        every += _path_parts(path.role, _with_source(path.name, source), root / path.name,
                             PATH_PROFILES.get(path.name, entry["profile"]), options)
    parts = [p for p in every if p.name in options.parts] if options.parts else every
    if not parts and every:  # nothing of what was asked applies: never a silent "nothing found"
        entry["error"] = (f"none of --parts {','.join(options.parts)} applies to {spec} (its parts here: "
                          f"{', '.join(sorted({p.name for p in every}))})")
    return entry, parts


PART_NAMES = ("planner-goldens", "planner-fuzz", "image-fuzz", "image-goldens", "image-corpus", "requests",
              "requests-mixed", "video-fuzz", "video-planner-fuzz")


def _path_parts(role: str, p_spec: str, where: Path, profile_name: str, options: ConformanceOptions) -> list[Part]:
    """The parts of one adapted path (its role's), writing under `where`."""
    profile = ["--profile", profile_name]
    seed = ["--seed", str(options.seed)]
    parts: list[Part] = []
    if role == "planner":
        parts.append(Part("planner-goldens", role, p_spec, ["golden", "check", "--planner", p_spec, *profile,
                                                             "--out", str(where / "planner-goldens")],
                          None, where / "planner-goldens"))
        parts.append(_fuzz_part("planner-fuzz", role, p_spec, where,
                                ["--planner", p_spec, *profile, "--planner-sizes", str(options.planner_sizes), *seed]))
    elif role == "candidate":
        parts.append(_fuzz_part("image-fuzz", role, p_spec, where,
                                ["--candidate", p_spec, *profile, "--examples", str(options.examples), *seed]))
        parts.append(Part("image-goldens", role, p_spec,
                          ["golden", "check", "--candidate", p_spec, *profile, "--kind", "pixels",
                           "--out", str(where / "image-goldens")], where / "image-goldens" / "golden-report.json",
                          where / "image-goldens"))
        if options.corpus is not None:
            parts.append(Part("image-corpus", role, p_spec,
                              ["check", str(options.corpus), "--candidate", p_spec, *profile, "--out",
                               str(where / "image-corpus"), "--json", str(where / "image-corpus.json")],
                              where / "image-corpus.json", where / "image-corpus"))
    elif role == "video candidate":  # K2.5 chunks (with images, --media both), docs/video.md
        profile_name = "k25"
        media = options.media if p_spec.split("@")[0] in MIXED_VIDEO_PATHS else "video"  # (what the path takes)
        parts.append(_fuzz_part("video-fuzz", role, p_spec, where,
                                ["--media", media, "--candidate", p_spec, "--profile", "k25",
                                 "--examples", str(options.examples), *seed]))
    elif role == "video planner":
        profile_name = "k25"
        parts.append(_fuzz_part("video-planner-fuzz", role, p_spec, where,
                                ["--media", "video", "--planner", p_spec, "--profile", "k25",
                                 "--examples", str(options.planner_sizes), *seed]))
    elif role == "request engine":
        for mixed in (False, True):
            parts.append(_fuzz_part("requests-mixed" if mixed else "requests", role, p_spec, where,
                                    ["--engine", p_spec, *profile, "--examples", str(options.scenarios), *seed,
                                     *(["--mixed-configs"] if mixed else [])]))
    for part in parts:
        part.profile = profile_name
    return parts


def _fuzz_part(name: str, role: str, spec: str, where: Path, args: list[str]) -> Part:
    return Part(name, role, spec, ["fuzz", *args, "--out", str(where / name), "--json", str(where / f"{name}.json")],
                where / f"{name}.json", where / name)


def run_part(part: Part, timeout_s: float) -> dict[str, Any]:
    """One part as `python -m kimi_oracle ARGS` (its output in `OUT.log`): its result entry."""
    part.out.mkdir(parents=True, exist_ok=True)
    log = part.out.parent / f"{part.name}.log"
    began = time.monotonic()
    command = [sys.executable, "-m", "kimi_oracle", *part.args]
    with open(log, "wb") as fh:
        try:
            code = subprocess.run(command, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            code = None
    result: dict[str, Any] = {"part": part.name, "role": part.role, "spec": part.spec, "profile": part.profile,
                              "command": "kimi-oracle " + " ".join(part.args), "exit_code": code,
                              "elapsed_s": round(time.monotonic() - began, 3), "log": str(log),
                              "out": str(part.out)}
    last = [line for line in log.read_text("utf-8", "replace").splitlines() if line.strip()]
    result["last_line"] = last[-1][:500] if last else ""
    if code is None:
        result.update(status="error", summary=f"no answer within {timeout_s:.0f} s (killed)")
        return result
    result["status"] = {EXIT_OK: "pass", EXIT_FINDINGS: "findings"}.get(code, "error")
    data = _read(part.json_path)
    result.update(_digest(part.name, data, result["last_line"]))
    return result


def _read(path: Path | None) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text("utf-8")) if path is not None and path.is_file() else None
    except (OSError, ValueError):
        return None


def _digest(name: str, data: dict[str, Any] | None, last_line: str) -> dict[str, Any]:
    """What the report keeps of a part's JSON: its findings, root-cause rows and pipeline."""
    if data is None:
        return {"summary": last_line, "findings": []}
    if name.startswith("planner"):
        planner = data.get("planner") or {}
        findings = [{k: f.get(k) for k in ("check", "key", "message", "field", "expected", "actual", "config_text")}
                    for f in planner.get("findings") or []]
        return {"summary": f"{planner.get('checked', 0)} sizes, {planner.get('passed', 0)} agree, "
                           f"{planner.get('rejected', 0)} rejected by the checkpoint, {len(findings)} finding(s)",
                "findings": findings}
    if name.startswith("video"):
        groups = data.get("groups") or []
        findings = [{"check": g.get("check", (g.get("key") or "").split("{")[0]), "key": g.get("key"),
                     "hits": g.get("count"), "explanation": g.get("explanation"),
                     "root_causes": g.get("explained_by") or [],
                     "message": ((g.get("smallest") or {}).get("message") if isinstance(g.get("smallest"), dict)
                                 else None) or f"{g.get('count')} differ"} for g in groups]
        done = data.get("examples", data.get("cases", "?"))
        return {"summary": f"{done} drawn, {len(findings)} group(s)" + (f"; error: {data['error']}"
                                                                       if data.get("error") else ""),
                "findings": findings}
    if name == "image-goldens":
        changes = [c for f in data.get("files") or [] for c in f.get("changes") or []]
        by_mode: dict[str, int] = {}
        for c in changes:
            mode = str(c.get("key", "?")).split("/")[0]
            by_mode[mode] = by_mode.get(mode, 0) + 1
        listed = ", ".join(f"{k} {v}" for k, v in sorted(by_mode.items()))
        return {"summary": f"{len(changes)} golden case(s) differ" + (f" ({listed})" if listed else ""),
                "findings": [], "differing_by_mode": by_mode}
    findings = [{k: f.get(k) for k in ("id", "check", "key", "root_causes", "explanation", "variants",
                                        "max_levels", "mean_levels", "hits", "message", "path", "mode_classes")}
                for f in data.get("findings") or []]
    return {"summary": f"{data.get('examples', data.get('scenarios', '?'))} examples, {len(findings)} finding(s)",
            "findings": findings, "root_causes": data.get("root_causes") or [],
            "pipeline": data.get("pipeline"), "pipeline_summary": data.get("pipeline_summary")}


def run_conformance(options: ConformanceOptions, progress: Any = None) -> tuple[dict[str, Any], int]:
    """Every engine's parts, run in turn; the report (also written to OUT) and its exit code."""
    options.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
                              "command": options.command(), "out": str(options.out),
                              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "options": {"examples": options.examples, "planner_sizes": options.planner_sizes,
                                          "scenarios": options.scenarios, "seed": options.seed,
                                          "corpus": str(options.corpus) if options.corpus else None},
                              "engines": [], "versions": versions()}
    code = EXIT_OK
    for spec in options.engines:
        entry, parts = plan_parts(spec, options)
        report["engines"].append(entry)
        if "error" in entry:
            code = EXIT_ERROR
        for part in parts:
            if progress is not None:
                progress(f"{part.spec}: {part.name} ...")
            result = run_part(part, options.part_timeout_s)
            entry["parts"].append(result)
            if progress is not None:
                progress(f"{part.spec}: {part.name}: {result['status']} ({result['elapsed_s']:.1f}s) {result.get('summary', '')}")
            if result["status"] == "error":
                code = EXIT_ERROR
            elif result["status"] == "findings" and code == EXIT_OK:
                code = EXIT_FINDINGS
        _write(options.out, report)  # after each engine: a run cut short keeps what it has
    report["exit_code"] = code
    _write(options.out, report)
    return report, code


def _write(out: Path, report: dict[str, Any]) -> None:
    from kimi_oracle.workflows.conformance_html import render_html
    from kimi_oracle.workflows.conformance_report import render_markdown

    atomic_write_text(out / "conformance.json", json.dumps(report, indent=1, default=str))
    atomic_write_text(out / "conformance.md", render_markdown(report))
    atomic_write_text(out / "conformance.html", render_html(report))


def parse_parts(text: str | None) -> tuple[str, ...]:
    """`planner-fuzz,image-fuzz` as part names (None or empty: every part)."""
    parts = tuple(s.strip() for s in (text or "").split(",") if s.strip())
    unknown = [p for p in parts if p not in PART_NAMES]
    if unknown:
        raise KimiOracleError(f"--parts: unknown part(s) {', '.join(unknown)}; parts: {', '.join(PART_NAMES)}")
    return parts


def parse_engines(text: str) -> tuple[str, ...]:
    """`sglang,vllm@0.33.0,transformers` as specs (each ENGINE[@SOURCE])."""
    from kimi_oracle.adapters.engines import ENGINES
    from kimi_oracle.adapters.sources import split_engine_spec

    specs = tuple(s.strip() for s in text.split(",") if s.strip())
    if not specs:
        raise KimiOracleError("--engines: name at least one engine (" + ", ".join(ENGINES) + ")")
    unknown = [s for s in specs if split_engine_spec(s)[0] not in ENGINES]
    if unknown:  # before anything runs
        raise KimiOracleError(f"conformance: unknown engine {split_engine_spec(unknown[0])[0]!r} "
                              f"(built-in: {', '.join(ENGINES)})")
    return specs


__all__ = ["PART_NAMES", "ConformanceOptions", "parse_engines", "parse_parts", "plan_parts", "run_conformance"]
