"""Golden files' shared ground: schema constants, errors, library versions, config hashes, locations."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

from kimi_oracle.core import files as core_files
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import KimiOracleError

SCHEMA_VERSION = 1
KINDS = ("grids", "pixels", "video")
IMAGE_KINDS = ("grids", "pixels")  # what `golden check` compares by default (`--media image`)
# `--media` -> the golden kinds it compares.
MEDIA_KINDS = {"image": IMAGE_KINDS, "video": ("video",), "both": KINDS}
DEFAULT_MAX_CHANGES = 20
MAX_GOLDEN_BYTES = 64 << 20  # one golden file read (core.files.read_text): ours are under 1 MB
OBTAINED_SUFFIX = ".obtained"
DEFAULT_OUT_DIR = Path("kimi-oracle-out") / "golden"
REPORT_NAME = "golden-report"
# Pixel cases are grouped into one candidate call per config, at most this many images a call.
_BATCH_IMAGES = 48


class GoldenError(KimiOracleError):
    """A golden directory or file cannot be used (missing directory, unwritable, bad arguments)."""


# ---------------------------------------------------------------------------------------------
# versions, hashes, locations


# The golden metadata's names for the libraries whose behaviour the goldens record.
GOLDEN_LIBRARIES = {"kimi_oracle": "kimi-oracle", "pillow": "Pillow", "numpy": "numpy", "torch": "torch"}


def library_versions() -> dict[str, str | None]:
    """Versions of the libraries whose behaviour the goldens record (from `core.files.versions`)."""
    installed = core_files.versions()
    return {key: installed[name] for key, name in GOLDEN_LIBRARIES.items()}


def config_hash(config: PreprocessConfig, *, video: bool = False) -> str:
    """SHA-256 of the config's canonical checkpoint JSON, image keys only (sorted keys, no spaces);
    with `video`, every key (a video golden depends on the video keys too)."""
    data = config.to_hf_json() if video else config.image_hf_json()
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def package_golden_dir() -> Path:
    """The golden files shipped inside the package (`kimi_oracle/golden_data`)."""
    return Path(__file__).resolve().parents[2] / "golden_data"


def default_golden_dir() -> Path:
    """The repository's `golden/` when running from a checkout, else the packaged copy."""
    packaged = package_golden_dir()
    checkout = Path(__file__).resolve().parents[3] / "golden"
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
