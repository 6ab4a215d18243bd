"""The layout of `oracle/checks/` (issue 24, item 1): one job per module, every name still importable.

Sizes are measured with `ast` (end_lineno - lineno + 1), as the issue defines them."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from kimi_oracle.oracle import checks

PACKAGE = Path(checks.__file__).resolve().parent
MODULES = sorted(PACKAGE.glob("*.py"))

# The names `kimi_oracle.oracle.checks` exported when it was one module (its `__all__` then),
# plus the two that other modules import without `__all__` naming them.
PUBLIC = [
    "ACCEPTS_INVALID", "CHECKS", "CRASH", "FEATURE_LENGTH", "FINDING_KINDS", "GRID_MISMATCH",
    "INVARIANCE", "INVARIANCE_KINDS", "PIXEL_MISMATCH", "REPORTED_ONLY", "SHAPE_DTYPE", "TIMEOUT",
    "Tolerance", "ToleranceError", "Verdict", "as_result", "check_invariance", "compare",
    "describe_location", "difference_magnitude", "failing", "invariance_plan", "levels_at",
    "levels_of", "locate", "pixel_stats", "same_output", "self_check", "source_range",
    "ulp_distance", "update_digest",
]
ALSO_IMPORTED = ["shape_dtype_problems", "_describe"]  # workflows/golden/candidates.py, oracle/candidates.py


def test_the_package_has_several_modules():
    assert len(MODULES) >= 5, [m.name for m in MODULES]


def test_no_module_over_600_lines_and_no_function_over_60():
    too_long = []
    for path in MODULES:
        text = path.read_text()
        if len(text.splitlines()) > 600:
            too_long.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > 60:
                    too_long.append(f"{path.name}:{node.lineno} {node.name}: {size} lines")
    assert too_long == []


def test_each_module_says_its_job_in_its_first_docstring_line():
    missing = [p.name for p in MODULES if not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()]
    assert missing == []


def test_every_name_is_still_importable_from_the_package():
    missing = [n for n in PUBLIC + ALSO_IMPORTED if not hasattr(checks, n)]
    assert missing == []
    assert sorted(checks.__all__) == sorted(PUBLIC)


def test_the_package_re_exports_the_submodules_objects_not_copies():
    for path in MODULES:
        if path.name == "__init__.py":
            continue
        module = importlib.import_module(f"kimi_oracle.oracle.checks.{path.stem}")
        for name in PUBLIC + ALSO_IMPORTED:
            if name in vars(module) and getattr(module, "__name__") == getattr(vars(module)[name], "__module__", None):
                assert getattr(checks, name) is vars(module)[name], (path.name, name)
