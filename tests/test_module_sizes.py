"""Issue 24's size rule, measured with ast: no module over 600 lines, no function over 60.

A function's length is `end_lineno - lineno + 1` of its definition, so a CLI `register` that
nests every command counts as one function with all of them inside it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kimi_oracle

PACKAGE = Path(kimi_oracle.__file__).parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _too_long_functions(path: Path) -> list[tuple[str, int, int]]:
    """(name, line, length) of every function or method over the limit, nested ones included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [(node.name, node.lineno, length) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (length := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES]


def test_the_package_is_measured():
    assert len(_modules()) > 100  # the package as installed, not an empty folder


def test_no_module_over_600_lines():
    long = [f"{p.relative_to(PACKAGE)} ({n} lines)" for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert long == []


def test_no_function_over_60_lines():
    long = [f"{p.relative_to(PACKAGE)}:{line} {name} ({length} lines)"
            for p in _modules() for name, line, length in _too_long_functions(p)]
    assert long == []


def test_the_measure_sees_a_long_nested_function(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    src = tmp_path / "m.py"
    src.write_text(f"def register(group):\n    def cmd():\n{body}\n    return cmd\n")
    assert [(name, length) for name, _, length in _too_long_functions(src)] == [
        ("register", MAX_FUNCTION_LINES + 3), ("cmd", MAX_FUNCTION_LINES + 1)]


def test_every_module_says_its_job_first():
    missing = [str(p.relative_to(PACKAGE)) for p in _modules()
               if p.stat().st_size and not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == []
