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

# The package's modules, one job each; every name stays importable from here (`golden.X`).
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.workflows.golden.common import (  # noqa: F401
    config_hash, default_golden_dir, DEFAULT_MAX_CHANGES, default_out_dir, DEFAULT_OUT_DIR,
    GOLDEN_LIBRARIES, golden_path, GoldenError, IMAGE_KINDS, KINDS, MEDIA_KINDS, library_versions, MAX_GOLDEN_BYTES, obtained_path,
    OBTAINED_SUFFIX, package_golden_dir, REPORT_NAME, SCHEMA_VERSION, _BATCH_IMAGES,
)
from kimi_oracle.workflows.golden.catalogue import (  # noqa: F401
    grid_catalogue, pixel_catalogue, PixelCase, RESAMPLE_SIZES, SIDE_CAP_MODES, SIDE_CAP_SIZES, SMALL_SIZES,
    _case, _generators, _mode_alpha_pairs, _pick,
)
from kimi_oracle.workflows.golden.entries import (  # noqa: F401
    digest, grid_entry, pixel_entry, _error_text, _pixel_stats, _to_numpy,
)
from kimi_oracle.workflows.golden.candidates import (  # noqa: F401
    load_candidate, NotRunAfterTimeout, open_candidate, run_pixel_cases, ShapeDtypeError, _checked,
    _is_reference, _mode_class, _run_one, _run_pixel_cases, _split,
)
from kimi_oracle.workflows.golden.fileformat import (  # noqa: F401
    CaseFilter, entry_key, GoldenFile, GoldenFormatError, load, parse, record, record_grids, record_pixels,
    remove_stale_temporaries, _meta,
)
from kimi_oracle.workflows.golden.diffs import (  # noqa: F401
    CheckInterrupted, diff_entries, EntryChange, FileReport, GoldenReport, _case_label, _describe_grid,
    _describe_pixels, _display, _grid_text, _pixel_grid_text, _size_text, _tokens,
)
from kimi_oracle.workflows.golden.checking import (  # noqa: F401
    check, MAX_DIAGNOSED, write_report, _check_out_dir, _compare, _compute, _diagnose_changes,
    _pillow_warning, _report_markdown, _rewritten, _selection, _write_obtained,
)
from kimi_oracle.workflows.golden.planners import (  # noqa: F401
    check_planner, planner_golden_report,
)
from kimi_oracle.workflows.golden.regeneration import (  # noqa: F401
    check_pixels, regen, _accept, _manifest_file,
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
