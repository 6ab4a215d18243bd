"""The logic of the atheris harnesses, importable (and replayable) without atheris.

Two harnesses turn fuzzer bytes into a differential case and judge it with the oracle:

- `structured`: a FuzzedDataProvider is the source of `inputs.draw.draw_fuzz_case` (the fuzz
  engine's draw): a configuration around a profile, then 1–3 images as `generators.CaseParams`
  (size class, mode, alpha pattern, content, seed); the shared generators build the images.
- `decoder`: the bytes are an image file; `images.decode` (pixel cap on) decodes it. Decode
  errors, over-cap images and inputs the reference refuses are *rejected*, not findings. The
  configuration is chosen from the profile's variants by a checksum of the bytes.

`PyFuzzedDataProvider` consumes bytes exactly like `atheris.FuzzedDataProvider` for the
methods used here (tested against it), so a corpus file replays to the same case with or
without atheris. `fuzz/*_fuzzer.py` and `kimi_oracle.fuzzers.atheris_entry` run these under atheris; the
nightly runner, the replay tests and `replay()` call them directly.

Settings come from the environment so that the harness files run unchanged under
ClusterFuzzLite: KIMI_FUZZ_CANDIDATE (default `reference`), KIMI_FUZZ_PROFILE (`k3`),
KIMI_FUZZ_CONFIG (a preprocessor_config.json), KIMI_FUZZ_TOLERANCE (`exact`),
KIMI_FUZZ_ISOLATE (run the candidate in an executor subprocess), KIMI_FUZZ_CASE_TIMEOUT (s),
KIMI_FUZZ_MEMORY_LIMIT (the executor's address-space allowance, MiB), KIMI_FUZZ_MAX_PIXELS (decoder pixel cap), KIMI_FUZZ_SHARD (`I/N`), KIMI_FUZZ_FINDINGS (a
directory: keep going after a finding and write it there, instead of raising), KIMI_FUZZ_STATUS
(a JSON file the harness keeps its counters in), KIMI_FUZZ_MAX_FINDINGS.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.core.errors import InputError
from kimi_oracle.fuzzers import HARNESSES
from kimi_oracle.inputs.draw import DrawOptions, ProviderSource, draw_fuzz_case
from kimi_oracle.inputs.generators import DEFAULT_MAX_SIDE, CaseParams, FuzzCase, config_variants
from kimi_oracle.oracle.kinds import CRASH
from kimi_oracle.oracle.grouping import finding_key

# Decoder harness pixel cap: far below Pillow's bomb limit, so one input stays fast.
DEFAULT_FUZZ_MAX_PIXELS = 1 << 22


class OracleFinding(AssertionError):
    """Raised in standalone mode (plain atheris / ClusterFuzzLite): libFuzzer saves the input."""


class Rejected(Exception):
    """The input is not a case: undecodable, over the pixel cap, or refused by the reference."""


# ---------------------------------------------------------------------------------------------
# FuzzedDataProvider without atheris


class PyFuzzedDataProvider:
    """Pure-Python twin of `atheris.FuzzedDataProvider` for ConsumeIntInRange, ConsumeBool,
    ConsumeBytes and PickValueInList: integers come from the end of the data (LLVM's rule),
    bytes and booleans from the front; an exhausted provider gives the minimum / False / b""."""

    def __init__(self, data: bytes):
        self._data = bytes(data)
        self._lo = 0
        self._hi = len(self._data)

    def remaining_bytes(self) -> int:
        """Bytes not consumed yet."""
        return self._hi - self._lo

    def ConsumeBytes(self, count: int) -> bytes:  # noqa: N802 - atheris' names
        """Up to `count` bytes from the front."""
        count = max(0, min(int(count), self._hi - self._lo))
        out = self._data[self._lo : self._lo + count]
        self._lo += count
        return out

    def ConsumeBool(self) -> bool:  # noqa: N802
        """The low bit of the next front byte."""
        if self._hi == self._lo:
            return False
        value = self._data[self._lo]
        self._lo += 1
        return bool(value & 1)

    def ConsumeIntInRange(self, lo: int, hi: int) -> int:  # noqa: N802
        """An integer in [lo, hi] from as many trailing bytes as the range needs."""
        if hi < lo:
            raise ValueError("ConsumeIntInRange: hi < lo")
        span = hi - lo
        result = 0
        offset = 0
        while offset < 64 and (span >> offset) > 0 and self._hi > self._lo:
            self._hi -= 1
            result = (result << 8) | self._data[self._hi]
            offset += 8
        if span != (1 << 64) - 1:
            result %= span + 1
        return lo + result

    def PickValueInList(self, values: Sequence[Any]) -> Any:  # noqa: N802
        """One element, by an index drawn like ConsumeIntInRange(0, len - 1)."""
        if not values:
            raise ValueError("PickValueInList: empty list")
        return values[self.ConsumeIntInRange(0, len(values) - 1)]


def provider(data: bytes) -> Any:
    """atheris' FuzzedDataProvider when atheris is installed, else the pure-Python twin."""
    try:
        import atheris  # noqa: F401

        return atheris.FuzzedDataProvider(data)
    except ImportError:
        return PyFuzzedDataProvider(data)


# ---------------------------------------------------------------------------------------------
# bytes -> cases


def parse_shard(text: str | None) -> tuple[int, int]:
    """`I/N` (1 ≤ I ≤ N) → (I, N); None or "" → (1, 1)."""
    if not text:
        return 1, 1
    try:
        i_text, n_text = str(text).split("/", 1)
        index, count = int(i_text), int(n_text)
    except ValueError:
        raise ValueError(f"bad shard {text!r}: expected I/N, e.g. 2/4") from None
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"bad shard {text!r}: need 1 <= I <= N")
    return index, count


def _shard_seed(params: CaseParams, shard: tuple[int, int]) -> CaseParams:
    index, count = shard
    return dataclasses.replace(params, seed=params.seed * count + (index - 1))


def structured_case(data: bytes, base: PreprocessConfig, *, vary: bool = True, max_images: int = 3,
                    max_side: int = DEFAULT_MAX_SIDE, shard: tuple[int, int] = (1, 1),
                    fdp: Any = None) -> tuple[FuzzCase, bool]:
    """(case, check_invariance) drawn from `data`: the invariance flag is the provider's first
    boolean, the case is `inputs.draw.draw_fuzz_case` over the provider's integers
    (`draw.ProviderSource`), and each image's seed then lands in this shard's residue class."""
    fdp = fdp if fdp is not None else PyFuzzedDataProvider(data)
    invariance = fdp.ConsumeBool()
    options = DrawOptions(vary_config=vary, max_images=max_images, max_side=max_side)
    case = draw_fuzz_case(ProviderSource(fdp), base, options)
    if shard != (1, 1):
        case = FuzzCase(case.config, tuple(_shard_seed(p, shard) for p in case.images))
    return case, invariance


@functools.lru_cache(maxsize=16)
def _decoder_configs(base: PreprocessConfig) -> tuple[PreprocessConfig, ...]:
    return (base,) + tuple(config_variants(base))


def decoder_config(data: bytes, base: PreprocessConfig) -> PreprocessConfig:
    """The configuration a decoder input runs under: a variant of `base` chosen by CRC-32."""
    variants = _decoder_configs(base)
    return variants[zlib.crc32(data) % len(variants)]


def decode_input(data: bytes, max_pixels: int = DEFAULT_FUZZ_MAX_PIXELS) -> Image.Image:
    """The decoded image, or Rejected (decode error, over the pixel cap)."""
    from kimi_oracle.core.images import decode

    try:
        return decode(bytes(data), max_pixels=max_pixels, name="<fuzz input>")
    except InputError as exc:
        raise Rejected(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# minimization


def minimize_bytes(data: bytes, still_fails: Callable[[bytes], bool], *, budget_s: float = 10.0,
                   max_tries: int = 60) -> bytes:
    """Shorter / simpler bytes for which `still_fails` holds: chunk removal, then zeroing."""
    best = bytes(data)
    deadline = time.monotonic() + budget_s
    tries = 0

    def attempt(candidate: bytes) -> bool:
        nonlocal tries, best
        if tries >= max_tries or time.monotonic() > deadline or candidate == best:
            return False
        tries += 1
        if still_fails(candidate):
            best = candidate
            return True
        return False

    chunk = max(1, len(best) // 2)
    while chunk >= 1 and tries < max_tries and time.monotonic() < deadline:
        start = 0
        progressed = False
        while start < len(best):
            if attempt(best[:start] + best[start + chunk :]):
                progressed = True
            else:
                start += chunk
            if tries >= max_tries or time.monotonic() > deadline:
                break
        if not progressed:
            chunk //= 2
    for i in range(len(best)):
        if tries >= max_tries or time.monotonic() > deadline:
            break
        if best[i]:
            attempt(best[:i] + b"\0" + best[i + 1 :])
    return best


# ---------------------------------------------------------------------------------------------
# the harness


@dataclass
class Outcome:
    """What one input did: `ok`, `rejected` or `finding` (with the verdict and the case)."""

    status: str
    verdict: Any = None
    images: list[Image.Image] = field(default_factory=list)
    config: PreprocessConfig | None = None
    params: list[dict[str, Any] | None] = field(default_factory=list)
    reason: str = ""

    @property
    def check(self) -> str | None:
        """The failed check of a finding (`timeout` for an executor timeout)."""
        return None if self.verdict is None else self.verdict.check

    def key(self) -> str:
        """A finding's `grouping.finding_key`: what makes two findings the same one."""
        return finding_key(str(self.verdict.check), self.verdict.stats, self.images)


@dataclass
class HarnessSettings:
    """Everything a harness needs; `from_env()` reads the KIMI_FUZZ_* variables."""

    candidate: str = "reference"
    profile: str | None = None  # None (and no config_path): config.DEFAULT_PROFILE
    config_path: str | None = None
    tolerance: str = "exact"
    isolate: bool = False
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S
    max_pixels: int = DEFAULT_FUZZ_MAX_PIXELS
    shard: tuple[int, int] = (1, 1)
    findings_dir: str | None = None
    status_path: str | None = None
    max_findings: int = 100
    vary_config: bool = True
    max_side: int = DEFAULT_MAX_SIDE
    minimize_s: float = 10.0
    deadline: float | None = None  # wall-clock (epoch) time after which inputs are skipped
    memory_limit_mb: int | None = None  # the executor's address-space allowance (isolate only)

    @classmethod
    def from_env(cls, env: Any = None) -> "HarnessSettings":
        """Settings from KIMI_FUZZ_* environment variables (defaults when absent)."""
        env = os.environ if env is None else env
        out = cls()
        out.candidate = env.get("KIMI_FUZZ_CANDIDATE") or out.candidate
        out.profile = env.get("KIMI_FUZZ_PROFILE") or None
        out.config_path = env.get("KIMI_FUZZ_CONFIG") or None
        out.tolerance = env.get("KIMI_FUZZ_TOLERANCE") or out.tolerance
        out.isolate = (env.get("KIMI_FUZZ_ISOLATE") or "0").lower() in ("1", "true", "yes")
        out.case_timeout_s = float(env.get("KIMI_FUZZ_CASE_TIMEOUT") or out.case_timeout_s)
        out.max_pixels = int(env.get("KIMI_FUZZ_MAX_PIXELS") or out.max_pixels)
        out.shard = parse_shard(env.get("KIMI_FUZZ_SHARD"))
        out.findings_dir = env.get("KIMI_FUZZ_FINDINGS") or None
        out.status_path = env.get("KIMI_FUZZ_STATUS") or None
        out.max_findings = int(env.get("KIMI_FUZZ_MAX_FINDINGS") or out.max_findings)
        out.vary_config = (env.get("KIMI_FUZZ_VARY_CONFIG") or "1").lower() not in ("0", "false", "no")
        out.minimize_s = float(env.get("KIMI_FUZZ_MINIMIZE_S") or out.minimize_s)
        out.deadline = float(env["KIMI_FUZZ_DEADLINE"]) if env.get("KIMI_FUZZ_DEADLINE") else None
        out.memory_limit_mb = int(env["KIMI_FUZZ_MEMORY_LIMIT"]) if env.get("KIMI_FUZZ_MEMORY_LIMIT") else None
        return out

    def to_env(self) -> dict[str, str]:
        """The KIMI_FUZZ_* variables that reproduce these settings."""
        env = {
            "KIMI_FUZZ_CANDIDATE": self.candidate,
            "KIMI_FUZZ_TOLERANCE": self.tolerance,
            "KIMI_FUZZ_ISOLATE": "1" if self.isolate else "0",
            "KIMI_FUZZ_CASE_TIMEOUT": str(self.case_timeout_s),
            "KIMI_FUZZ_MAX_PIXELS": str(self.max_pixels),
            "KIMI_FUZZ_SHARD": f"{self.shard[0]}/{self.shard[1]}",
            "KIMI_FUZZ_MAX_FINDINGS": str(self.max_findings),
            "KIMI_FUZZ_VARY_CONFIG": "1" if self.vary_config else "0",
            "KIMI_FUZZ_MINIMIZE_S": str(self.minimize_s),
        }
        if self.profile:
            env["KIMI_FUZZ_PROFILE"] = self.profile
        if self.config_path:
            env["KIMI_FUZZ_CONFIG"] = self.config_path
        if self.findings_dir:
            env["KIMI_FUZZ_FINDINGS"] = self.findings_dir
        if self.status_path:
            env["KIMI_FUZZ_STATUS"] = self.status_path
        if self.deadline is not None:
            env["KIMI_FUZZ_DEADLINE"] = repr(self.deadline)
        if self.memory_limit_mb:
            env["KIMI_FUZZ_MEMORY_LIMIT"] = str(self.memory_limit_mb)
        return env

    def base_config(self) -> PreprocessConfig:
        """The profile or config file the harness varies around (`PreprocessConfig.resolve`:
        naming both is a ConfigError)."""
        return PreprocessConfig.resolve(self.profile, self.config_path)


class Harness:
    """One harness (structured or decoder) with its candidate, counters and finding sink."""

    def __init__(self, name: str, settings: HarnessSettings | None = None, *, candidate: Any = None):
        if name not in HARNESSES:
            raise ValueError(f"unknown harness {name!r}; expected one of {', '.join(HARNESSES)}")
        self.name = name
        self.settings = settings or HarnessSettings()
        self.base = self.settings.base_config()
        if candidate is None:
            if self.settings.isolate:
                from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

                candidate = IsolatedCandidate(self.settings.candidate, timeout_s=self.settings.case_timeout_s,
                                              memory_limit_mb=self.settings.memory_limit_mb)
                candidate.start()
            else:
                from kimi_oracle.oracle.candidates import load_candidate

                candidate = load_candidate(self.settings.candidate)
        self.candidate = candidate
        # examples: inputs judged; skipped: inputs libFuzzer ran past the deadline, not judged
        self.counters: dict[str, int] = {"examples": 0, "ok": 0, "rejected": 0, "findings": 0, "duplicates": 0,
                                         "skipped": 0}
        self.signatures: dict[str, str] = {}  # finding_key -> finding id
        self.finding_ids: list[str] = []
        self._last_status = 0.0
        self._load_status()

    # -- bytes -> outcome

    def evaluate(self, data: bytes, fdp: Any = None) -> Outcome:
        """Judge one input (never raises for a finding; harness errors propagate)."""
        from kimi_oracle.fuzzers.fuzzing import Rejected as ReferenceRejected
        from kimi_oracle.fuzzers.fuzzing import evaluate

        if self.name == "structured":
            case, invariance = structured_case(data, self.base, vary=self.settings.vary_config,
                                               max_side=self.settings.max_side, shard=self.settings.shard, fdp=fdp)
            images = case.make_images()
            config = case.config
            params: list[dict[str, Any] | None] = [p.to_dict() for p in case.images]
        else:
            try:
                img = decode_input(data, self.settings.max_pixels)
            except Rejected as exc:
                return Outcome("rejected", reason=str(exc))
            images = [img]
            config = decoder_config(data, self.base)
            params = [None]
            invariance = False
        try:
            verdict = evaluate(self.candidate, images, config, self.settings.tolerance,
                               invariance=invariance and len(images) > 1)
        except ReferenceRejected as exc:
            return Outcome("rejected", images=images, config=config, params=params, reason=str(exc))
        if verdict.ok:
            return Outcome("ok", verdict, images, config, params)
        return Outcome("finding", verdict, images, config, params)

    def test_one_input(self, data: bytes) -> None:
        """The atheris entry: judge `data`; keep going (findings dir) or raise OracleFinding."""
        if self.settings.deadline is not None and time.time() > self.settings.deadline:
            # Past the runner's budget (libFuzzer only checks its own clock between inputs, and
            # not while it replays the initial corpus): skip, so the run ends on time.
            self.counters["skipped"] += 1
            if self.counters["skipped"] == 1:
                self._write_status()  # nothing is judged from here on: the judged count is final
            return
        fdp = None
        if self.name == "structured":
            fdp = provider(data)
        outcome = self.evaluate(data, fdp)
        self.counters["examples"] += 1
        if outcome.status != "finding":
            self.counters[outcome.status] += 1
            self._maybe_status()
            return
        if not self.settings.findings_dir:
            raise OracleFinding(f"{outcome.check}: {outcome.verdict.message}")
        self.record(data, outcome)
        self._maybe_status()

    # -- findings

    def record(self, data: bytes, outcome: Outcome) -> str | None:
        """Write the finding (minimized first when it is a crash) unless its key is known.

        Two findings are the same when `grouping.finding_key` says so (fuzz() and nightly use it too)."""
        sig = outcome.key()
        if sig in self.signatures or len(self.signatures) >= self.settings.max_findings:
            self.counters["duplicates"] += 1
            return None
        if outcome.check == CRASH and self.settings.minimize_s > 0:
            data, outcome = self._minimize(data, outcome, sig)
        path = write_fuzz_finding(self.settings.findings_dir, outcome, data, harness=self.name,
                                  candidate=self.candidate.spec, tolerance=self.settings.tolerance,
                                  signature=sig)
        self.signatures[sig] = path.name
        self.finding_ids.append(path.name)
        self.counters["findings"] += 1
        self._write_status()
        return path.name

    def _minimize(self, data: bytes, outcome: Outcome, sig: str) -> tuple[bytes, Outcome]:
        found: dict[bytes, Outcome] = {}

        def still_fails(candidate: bytes) -> bool:
            fdp = provider(candidate) if self.name == "structured" else None
            try:
                again = self.evaluate(candidate, fdp)
            except Exception:
                return False
            ok = again.status == "finding" and again.key() == sig
            if ok:
                found[candidate] = again
            return ok

        smaller = minimize_bytes(data, still_fails, budget_s=self.settings.minimize_s)
        if smaller != data and smaller in found:
            result = found[smaller]
            result.verdict.stats["minimized_from_bytes"] = len(data)
            return smaller, result
        return data, outcome

    # -- counters on disk (the runner reads them; libFuzzer may exit without Python's atexit)

    def _load_status(self) -> None:
        path = self.settings.status_path
        if not path or not Path(path).exists():
            return
        try:
            old = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            return
        for key in self.counters:
            self.counters[key] = int(old.get("counters", {}).get(key, 0))
        self.signatures = dict(old.get("signatures", {}))
        self.finding_ids = list(old.get("finding_ids", []))

    def status(self) -> dict[str, Any]:
        """Counters, signatures and finding ids, as written to KIMI_FUZZ_STATUS."""
        out: dict[str, Any] = {"harness": self.name, "counters": dict(self.counters),
                               "signatures": self.signatures, "finding_ids": self.finding_ids}
        behaviours = getattr(self.candidate, "behaviours", None)
        if behaviours is not None:
            out["behaviours"] = sorted("|".join(b) for b in behaviours)
        return out

    def _maybe_status(self) -> None:
        if self.settings.status_path and time.monotonic() - self._last_status > 1.0:
            self._write_status()

    def _write_status(self) -> None:
        if not self.settings.status_path:
            return
        from kimi_oracle.core.files import write_json

        self._last_status = time.monotonic()
        write_json(self.settings.status_path, self.status())


FUZZ_INPUT_FILE = "fuzz-input.bin"


def fuzz_input_record(harness: str, data: bytes) -> dict[str, Any]:
    """case.json's `fuzz_input` entry: which harness, the file holding the raw bytes, and how to replay."""
    return {
        "harness": harness,
        "file": FUZZ_INPUT_FILE,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "replay": f"python -m kimi_oracle.fuzzers.atheris_entry {harness} --replay {FUZZ_INPUT_FILE}",
    }


def write_fuzz_finding(out_dir: str | os.PathLike, outcome: Outcome, data: bytes, *, harness: str,
                       candidate: str, tolerance: str, signature: str, engine: str = "atheris") -> Path:
    """`out_dir/findings/<id>/` in report.py's format, plus `fuzz-input.bin` (the raw bytes)."""
    from kimi_oracle.fuzzers.fuzzing import finding_from
    from kimi_oracle.results.report import write_finding

    verdict = outcome.verdict
    raw = [bytes(data)] if harness == "decoder" else []
    finding = finding_from(verdict, candidate, outcome.config, outcome.images, params=outcome.params,
                           tolerance=tolerance, engine=engine, sources=[FUZZ_INPUT_FILE] if raw else [],
                           raw_inputs=raw)
    finding.extra["fuzz_input"] = fuzz_input_record(harness, data)
    finding.extra["signature"] = signature
    return write_finding(out_dir, finding, extra_files={FUZZ_INPUT_FILE: bytes(data)})


# ---------------------------------------------------------------------------------------------
# replay


def replay(name: str, data: bytes, *, settings: HarnessSettings | None = None, candidate: Any = None) -> Outcome:
    """Judge one input the way the harness would, without atheris."""
    harness = Harness(name, settings or HarnessSettings(), candidate=candidate)
    return harness.evaluate(data, PyFuzzedDataProvider(data) if name == "structured" else None)


def describe_input(name: str, data: bytes, base: PreprocessConfig, shard: tuple[int, int] = (1, 1)) -> str:
    """A human label of what an input means to a harness."""
    if name == "structured":
        case, inv = structured_case(data, base, shard=shard)
        return case.describe() + (" (+invariance)" if inv else "")
    try:
        img = decode_input(data)
    except Rejected as exc:
        return f"rejected: {exc}"
    return f"{img.width}x{img.height} {img.mode} under {decoder_config(data, base).name}"
