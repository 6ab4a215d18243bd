"""The recipes of docs/architecture.md stay true: at most three files each, files that exist, and
the homes they rely on (the catalogue's suitable inputs and docs rows, the gate's stage modules,
the kinds' meanings) hold what a newcomer adds there."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from kimi_oracle.oracle import kinds
from kimi_oracle.oracle.candidates import BUILTINS
from kimi_oracle.oracle.diagnosis import CATALOGUE, table
from kimi_oracle.oracle.diagnosis.catalogue import DOC_ROWS
from kimi_oracle.results.aggregation import cause_meaning
from kimi_oracle.workflows.gate import run as gate_run

REPO = Path(__file__).resolve().parent.parent
GATE = REPO / "kimi_oracle" / "workflows" / "gate"


def _section(path: Path, heading: str) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _recipes() -> dict[str, str]:
    """Each recipe's text by its bold title (`A root cause`, ...)."""
    parts = re.split(r"\n\*\*(An? [a-z ]+)\*\* ", _section(REPO / "docs" / "architecture.md", "## Recipes"))
    return dict(zip(parts[1::2], parts[2::2]))


def test_the_five_recipes_each_touch_at_most_three_files():
    recipes = _recipes()
    assert set(recipes) == {"A root cause", "A check kind", "An engine path", "A gate stage", "A report format"}
    for title, text in recipes.items():
        items = re.findall(r"^(\d+)\. ", text, re.M)
        assert items == [str(i) for i in range(1, len(items) + 1)] and 1 <= len(items) <= 3, (title, items)
        said = re.match(r"\((?:[^()]|\([^()]*\))*?(\d) files\)", text)
        assert said and int(said.group(1)) == len(items), (title, text[:80])


def test_the_files_the_recipes_name_exist():
    named = re.findall(r"`((?:kimi_oracle|tests|docs)/[\w/.]+?\.(?:py|md))`", _section(REPO / "docs" / "architecture.md",
                                                                                    "## Recipes"))
    assert len(named) >= 10
    missing = [p for p in named if not (REPO / p).is_file()]
    assert missing == []


# -- a root cause -------------------------------------------------------------------------------

def test_every_root_cause_brings_its_suitable_input_and_docs_row():
    missing = [c.id for c in CATALOGUE if c.suitable is None or not all(DOC_ROWS.get(c.id, ("", "")))]
    assert missing == []
    assert list(DOC_ROWS) == [c.id for c in CATALOGUE]  # no row of a family that is gone, in order


def test_the_docs_catalogue_table_is_the_catalogues():
    text = (REPO / "docs" / "diagnosis.md").read_text(encoding="utf-8")
    assert table.replaced(text) == text, "run: python -m kimi_oracle.oracle.diagnosis.table"
    assert all(f"| `{c.id}` |" in text for c in CATALOGUE)


def test_the_table_command_rewrites_a_stale_table(tmp_path):
    doc = tmp_path / "diagnosis.md"
    doc.write_text(f"intro\n{table.BEGIN}\n| `stale` | | |\n{table.END}\nafter\n", encoding="utf-8")
    assert table.main([str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == f"intro\n{table.BEGIN}\n{table.render()}\n{table.END}\nafter\n"
    doc.write_text("no markers\n", encoding="utf-8")
    assert table.main([str(doc)]) == 2 and doc.read_text(encoding="utf-8") == "no markers\n"


# -- a gate stage -------------------------------------------------------------------------------

def _defines_run(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef) and node.name == "run" for node in tree.body)


def test_every_module_with_a_run_function_is_a_gate_stage():
    with_run = {p.stem for p in GATE.glob("*.py") if _defines_run(p)}
    assert with_run == {m.__name__.rpartition(".")[2] for m in gate_run.stage_modules()}
    assert gate_run.STAGES == tuple(m.NAME for m in gate_run.stage_modules())
    assert set(gate_run.COMPARED_STAGES) <= set(gate_run.STAGES)
    # The values are a contract (the gate's JSON names its stages; docs/gate.md lists them):
    assert gate_run.STAGES == ("goldens", "planner", "fuzz", "corpus", "invariance", "engine", "video", "performance")
    assert gate_run.COMPARED_STAGES == ("goldens", "fuzz", "corpus", "invariance")


def test_docs_gate_lists_the_stages_in_order():
    listed = re.findall(r"^\d+\. \*\*([a-z_]+)\*\*", _section(REPO / "docs" / "gate.md", "## Stages"), re.M)
    assert tuple(listed) == gate_run.STAGES


def _package(root: Path, name: str, modules: dict[str, str]) -> tuple[Path, str]:
    folder = root / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for module, body in modules.items():
        (folder / f"{module}.py").write_text(body)
    return folder, name


STAGE = 'NAME = "{name}"\nORDER = {order}\nCOMPARED = {compared}\n\n\ndef run(ctx):\n    return ctx\n'


def test_a_new_stage_module_is_found_in_its_order(tmp_path, monkeypatch):
    # The recipe's dry run: one new module, and the gate's lists hold it in its place.
    monkeypatch.syspath_prepend(str(tmp_path))
    folder, package = _package(tmp_path, "fake_gate_stages", {
        "first": STAGE.format(name="first", order=10, compared=True),
        "helper": "VALUE = 1\n",
        "between": STAGE.format(name="between", order=15, compared=False),
        "last": STAGE.format(name="last", order=60, compared=True),
    })
    try:
        found = gate_run.stage_modules(folder, package)
        assert [m.NAME for m in found] == ["first", "between", "last"]
        assert [m.NAME for m in found if m.COMPARED] == ["first", "last"]
    finally:
        for key in [k for k in sys.modules if k.startswith(package)]:
            del sys.modules[key]


@pytest.mark.parametrize("modules, error", [
    ({"a": STAGE.format(name="a", order=10, compared=True), "b": STAGE.format(name="b", order=10, compared=True)},
     ValueError),
    ({"a": STAGE.format(name="same", order=10, compared=True), "b": STAGE.format(name="same", order=20, compared=True)},
     ValueError),
    ({"a": 'NAME = "a"\nCOMPARED = True\n\n\ndef run(ctx):\n    return ctx\n'}, TypeError),
    ({"a": STAGE.format(name="a", order=True, compared=True)}, TypeError),  # a bool is no ORDER
])
def test_a_stage_that_does_not_name_its_place_is_refused(tmp_path, monkeypatch, modules, error):
    monkeypatch.syspath_prepend(str(tmp_path))
    folder, package = _package(tmp_path, "bad_gate_stages", modules)
    try:
        with pytest.raises(error):
            gate_run.stage_modules(folder, package)
    finally:
        for key in [k for k in sys.modules if k.startswith(package)]:
            del sys.modules[key]


# -- a check kind and an engine path ------------------------------------------------------------

def test_the_kinds_properties_name_only_kinds():
    for name in ("CHECK_MEANINGS", "PER_MODE_CLASS", "REPORTED_ONLY"):  # (or kinds against the project)
        assert set(getattr(kinds, name)) <= set(kinds.FINDING_KINDS) | set(kinds.PROJECT_KINDS), name
    assert not set(kinds.PROJECT_KINDS) & set(kinds.FINDING_KINDS)
    assert kinds.PIXEL_MISMATCH not in kinds.CHECK_MEANINGS  # pixel findings name root causes
    for kind in kinds.FINDING_KINDS:
        text = cause_meaning(kind)
        assert text and "\n" not in text and not text.endswith("."), kind


def test_every_builtin_candidate_names_a_module_and_a_description():
    for name, (module, attr, description) in BUILTINS.items():
        spec = importlib.util.find_spec(module)  # found without running it (no triton import)
        assert spec is not None and spec.origin, name
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        defined |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
        defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        assert attr in defined and description, name
