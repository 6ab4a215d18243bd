"""The tests mirror the package: each test module lives where the code it mainly tests lives.

A test module sits in `tests/<path>/` where `kimi_oracle/<path>/` is a subpackage (`tests/core`,
`tests/pipelines/gpu`, `tests/workflows/gate`, ...), in `tests/cli` (the CLI, end to end) or
`tests/benchmarks`; the few at the top check the whole package. Modules that are not tests
live in `tests/helpers` (on pytest's `pythonpath`) or `tests/mutants` (planted candidates);
`conftest.py` files sit beside the tests whose fixtures they hold. None of them edits `sys.path`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kimi_oracle

TESTS = Path(__file__).resolve().parent
PACKAGE = Path(kimi_oracle.__file__).resolve().parent

# Folders that mirror no subpackage: end-to-end CLI tests (also the mirror of kimi_oracle/cli)
# and the benchmarks. Not-test modules go to helpers or mutants; data holds no Python at all.
TEST_FOLDERS = ("cli", "benchmarks")
HELPER_FOLDERS = ("helpers", "mutants")
# Checks of the package as a whole, the only test modules at the top of tests/.
WHOLE_PACKAGE = ("test_architecture.py", "test_layout.py", "test_module_sizes.py", "test_one_home.py",
                 "test_recipes.py")


def _mirrors(folder: tuple[str, ...], package: Path) -> bool:
    return bool(folder) and (package.joinpath(*folder) / "__init__.py").is_file()


def misplaced(tests: Path, package: Path) -> list[str]:
    """Python files under `tests` that break the layout, as paths relative to it, with the reason."""
    wrong = []
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests)
        if "__pycache__" in rel.parts:
            continue
        folder, top = rel.parts[:-1], rel.parts[0] if len(rel.parts) > 1 else ""
        if top == "data":
            wrong.append(f"{rel}: no Python under data/")
        elif path.name == "conftest.py" or top in HELPER_FOLDERS:
            continue
        elif not path.name.startswith("test_"):
            wrong.append(f"{rel}: not a test module, belongs in {' or '.join(f + '/' for f in HELPER_FOLDERS)}")
        elif not folder:
            if path.name not in WHOLE_PACKAGE:
                wrong.append(f"{rel}: only whole-package checks sit at the top of tests/")
        elif not (top in TEST_FOLDERS or _mirrors(folder, package)):
            wrong.append(f"{rel}: {'/'.join(folder)}/ mirrors no subpackage of kimi_oracle")
    return wrong


def edits_sys_path(tests: Path) -> list[str]:
    """Python files under tests/ (test modules, conftests, helpers, the mutants' report scripts,
    run as `cd tests && python -m mutants.<script>`) that call a method of `sys.path`."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests)
        if "__pycache__" in rel.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "path" and isinstance(node.value.value, ast.Name)
                    and node.value.value.id == "sys"):
                found.append(f"{rel}: sys.path.{node.attr}")
    return found


def test_every_test_module_lives_where_its_code_lives():
    assert misplaced(TESTS, PACKAGE) == []


def test_test_module_names_are_unique():
    # No test folder is a package, so pytest imports each test module by its file name alone.
    names = [p.name for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []
    assert not [p for p in TESTS.rglob("__init__.py") if p.parent.name not in HELPER_FOLDERS]


def test_a_folder_named_after_the_work_order_is_refused(tmp_path):
    package = tmp_path / "pkg"
    for sub in ("core", "workflows", "workflows/gate"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "workflows" / "notes").mkdir()  # a folder, but no subpackage
    tests = tmp_path / "tests"
    files = ["core/test_ok.py", "workflows/gate/test_ok2.py", "cli/test_e2e.py", "benchmarks/test_b.py",
             "helpers/lib.py", "mutants/planted.py", "core/conftest.py", "test_layout.py",
             "foundation/test_x.py", "workflows/notes/test_y.py", "core/lib.py", "test_gate.py",
             "data/script.py"]
    for name in files:
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text("")
    assert [w.split(":")[0] for w in misplaced(tests, package)] == [
        "core/lib.py", "data/script.py", "foundation/test_x.py", "test_gate.py", "workflows/notes/test_y.py"]


def test_no_test_module_or_helper_edits_sys_path(tmp_path):
    assert edits_sys_path(TESTS) == []
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "lib.py").write_text("import sys\nsys.path.insert(0, 'x')\n")
    (tmp_path / "test_a.py").write_text("import sys\n\n\ndef test_a():\n    sys.path.append('y')\n")
    (tmp_path / "test_b.py").write_text("import sys\n\n\ndef test_b():\n    assert sys.path\n")
    assert edits_sys_path(tmp_path) == ["helpers/lib.py: sys.path.insert", "test_a.py: sys.path.append"]
