"""Known divergences: what a candidate is allowed to get wrong, from a baseline or from a file.

The gate judges a candidate root cause by root cause and mode class (`oracle.diagnosis` names
the causes of each pixel difference; `oracle.grouping` the mode class of the image at fault).
This package holds the rules, free of any candidate run, so that they can be tested on their own:

- `aggregate(observations)`: one row per (root cause, mode class) over the judged inputs of one
  side (NEW or OLD): the largest and the mean level difference the cause accounts for, the
  largest share of output values that differ, and the inputs it appeared on.
- `compare_rows(new, old, margin)`: each row's verdict, `new`, `worse`, `known` or `improved`
  (docs/gate.md states the rules).
- `KnownFile`: the `--known` TOML file (read by `core.files.load_toml`, validated key by key) and
  `write_known` for `--write-known`.
"""

from __future__ import annotations

from kimi_oracle.workflows.known.known_file import (KNOWN_SCHEMA, KNOWN_SCHEMA_VERSION, NEVER_KNOWN, KnownEntry,
                                                    KnownFile, KnownFileError, known_toml, never_known_kind,
                                                    read_known, write_known)
from kimi_oracle.workflows.known.sides import (ABSENT, DEFAULT_MARGIN_PCT, IMPROVED, KNOWN, MAX_MARGIN_PCT, METRICS,
                                               NEW, SLACK, VERDICTS, WORSE, Margin, Side, aggregate, family_variants)
from kimi_oracle.workflows.known.verdicts import compare_rows, describe_side, row_reason, rows_markdown

__all__ = [
    "ABSENT", "DEFAULT_MARGIN_PCT", "IMPROVED", "KNOWN", "KNOWN_SCHEMA", "KNOWN_SCHEMA_VERSION", "KnownEntry",
    "KnownFile", "KnownFileError", "MAX_MARGIN_PCT", "METRICS", "Margin", "NEVER_KNOWN", "NEW", "SLACK", "Side",
    "VERDICTS", "WORSE", "aggregate", "compare_rows", "describe_side", "family_variants", "known_toml",
    "never_known_kind", "read_known", "row_reason", "rows_markdown", "write_known",
]
