"""The results' public surface: every name the split modules of `results/` define, re-exported.

`kimi_oracle.results.report` was one module (finding files, case-file validation, diff images,
Markdown, aggregation, JUnit); code inside and outside the package imports from it, so every
name it had stays importable here. New code may import from the module that defines a name:
`finding` (the record), `finding_files` (writing findings/<id>/), `case_file` (reading one
back), `diffs`, `markdown`, `aggregation` (root cause x mode class rows), `junit`.
"""

from __future__ import annotations

from kimi_oracle.results.aggregation import (CHECK_MEANINGS, cause_entries, cause_levels, cause_meaning,
                                             finding_summary, root_cause_rows)
from kimi_oracle.results.case_file import (MAX_CASE_BYTES, _field_error, _plain_name, _validate_case,
                                           finding_file, load_case_image, read_case)
from kimi_oracle.results.diffs import (MAX_LONG_SIDE, MIN_SHORT_SIDE, _scale_panel, _to_u8, _wrap_label,
                                       diff_image, panel_scale, unpatchify)
from kimi_oracle.results.explanation import explanation_fields, explanation_line
from kimi_oracle.results.finding import (FINDING_SCHEMA, FINDING_SCHEMA_VERSION, RUN_SCHEMA, RUN_SCHEMA_VERSION,
                                         Finding)
from kimi_oracle.results.finding_files import (_RESERVED_NAMES, _check_extra_names, _faithful, encode_input,
                                               load_input, write_finding)
from kimi_oracle.results.junit import JUnitCase, junit_cases_for, junit_xml, root_cause_junit, write_junit
from kimi_oracle.results.markdown import (_fmt, _levels, finding_lines, finding_markdown, root_cause_markdown,
                                          summary_markdown)

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
    "explanation_fields",
    "explanation_line",
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
