"""One named home per rule (issue 24, item 3): the package's sources are read with `ast`, and a
rule written a second time (a bare threshold, a copied default, a literal check name) fails here.

The homes: `core.levels.is_sub_level` (under one level), `core.defaults` (the case timeout and
`fresh_seed`), `core.errors` (the exit codes), `core.images.ORIENTATION_TAG`, and the check-name
constants of `oracle.checks`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kimi_oracle.core import defaults, errors, interrupts, levels
from kimi_oracle.oracle import checks

PACKAGE = Path(__file__).resolve().parent.parent / "kimi_oracle"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py"))
CHECK_NAMES = set(checks.FINDING_KINDS)
# The constant that names each check (PIXEL_MISMATCH = "pixel_mismatch"): its one definition is
# the only place the literal may stand, whichever module holds it.
CONSTANT_OF = {getattr(checks, n): n for n in dir(checks)
               if n.isupper() and isinstance(getattr(checks, n), str) and getattr(checks, n) in CHECK_NAMES}


_PARSED: list[tuple[str, str, ast.AST]] = []


def _trees() -> list[tuple[str, str, ast.AST]]:
    """(path under kimi_oracle/, text, tree) of every source file, parsed once."""
    if not _PARSED:
        _PARSED.extend((p.relative_to(PACKAGE).as_posix(), p.read_text(), ast.parse(p.read_text())) for p in SOURCES)
    return _PARSED


def _segment(text: str, node: ast.AST) -> str:
    return ast.unparse(node)


def _constants(node: ast.AST) -> list[ast.Constant]:
    if isinstance(node, ast.Constant):
        return [node]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e for e in node.elts if isinstance(e, ast.Constant)]
    return []


def test_the_sub_level_threshold_is_only_is_sub_level():
    # A comparison with 1.0 next to a level quantity (a name holding "level", or the `top` and
    # `diff` of the levels code) is the rule written again: use core.levels.is_sub_level.
    found = []
    for name, text, tree in _trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            if not any(isinstance(o, ast.Constant) and o.value == 1.0 and not isinstance(o.value, bool)
                       for o in operands):
                continue
            others = " ".join(_segment(text, o) for o in operands if not isinstance(o, ast.Constant))
            if "level" in others or re.search(r"\b(top|diff)\b|\bd\[0\]", others):
                found.append(f"{name}:{node.lineno}: {_segment(text, node)}")
    assert found == []
    assert levels.is_sub_level(0.999) and not levels.is_sub_level(1.0) and levels.ONE_LEVEL == 1.0


def _lines(matches, home: str) -> list[str]:
    """`path:line: text` of every source line outside `home` for which `matches(line)` holds."""
    return [f"{name}:{i}: {line.strip()}" for name, text, _ in _trees() if name != home
            for i, line in enumerate(text.splitlines(), 1) if matches(line)]


def test_the_case_timeout_has_one_home():
    def copied(line: str) -> bool:
        return bool(re.search(r"timeout", line, re.I) and re.search(r"=\s*30(\.0)?\b|[\"']30s[\"']", line))

    assert _lines(copied, "core/defaults.py") == []
    assert defaults.DEFAULT_CASE_TIMEOUT_S == 30.0 and defaults.DEFAULT_CASE_TIMEOUT == "30s"


def test_a_fresh_seed_has_one_policy():
    def drawn(line: str) -> bool:
        return bool(re.search(r"SystemRandom|urandom|getrandbits", line) or ("seed" in line and "time.time()" in line))

    assert _lines(drawn, "core/defaults.py") == []
    seeds = {defaults.fresh_seed() for _ in range(64)}
    assert len(seeds) > 60 and all(0 <= s < 2**32 for s in seeds)


def test_exit_codes_are_defined_once():
    found = []
    for name, _, tree in _trees():
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                names = [e for e in target.elts] if isinstance(target, ast.Tuple) else [target]
                for t in names:
                    if isinstance(t, ast.Name) and t.id.startswith("EXIT_") and name != "core/errors.py":
                        # an import re-exporting the constant is no assignment; only a new value is
                        if not isinstance(node.value, ast.Name):
                            found.append(f"{name}:{node.lineno}: {t.id}")
    assert found == []
    # 128 + the signal's number (POSIX shells' convention), written by hand.
    assert (errors.EXIT_INTERRUPTED, errors.EXIT_TERMINATED) == (128 + 2, 128 + 15)
    assert interrupts.EXIT_INTERRUPTED is errors.EXIT_INTERRUPTED
    assert errors.KimiOracleError.exit_code == errors.EXIT_ERROR == 2


def test_the_orientation_tag_is_written_once():
    hits = [(name, i) for name, text, _ in _trees() for i, line in enumerate(text.splitlines(), 1)
            if re.search(r"0x0112\b", line, re.I) and not line.lstrip().startswith("#")]
    assert [name for name, _ in hits] == ["core/images.py"]
    from kimi_oracle.core.images import ORIENTATION_TAG
    from kimi_oracle.inputs import requests

    assert ORIENTATION_TAG == 274 and requests.ORIENTATION_TAG is ORIENTATION_TAG  # EXIF tag 274


def _check_literals(name: str, text: str, tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        hits: list[ast.Constant] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            others = " ".join(_segment(text, o) for o in operands)
            # stage names and libFuzzer's artifact prefixes share words with the checks
            if not re.search(r"\bstage\b|\.name\b|\bprefix\b", others):
                hits = [c for o in operands for c in _constants(o)]
                if isinstance(node.ops[0], (ast.In, ast.NotIn)) and isinstance(node.left, ast.Constant):
                    hits.remove(node.left)  # `"invariance" in extra`: a key looked up, not a check
        elif isinstance(node, ast.Return) and node.value is not None:
            hits = _constants(node.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            # a gate stage's NAME (workflows/gate/invariance.py) shares its word with the check
            stage_name = name.startswith("workflows/gate/") and names == ["NAME"]
            if not (stage_name or (len(targets) == 1 and names == [CONSTANT_OF.get(node.value.value)])):
                hits = [node.value]
        elif isinstance(node, ast.Call):
            func = _segment(text, node.func)
            if func == "Verdict" and node.args:
                hits = _constants(node.args[0])
            elif func == "getattr" and len(node.args) == 3:
                hits = _constants(node.args[2])
        elif isinstance(node, ast.Dict):
            # a dict keyed or valued by check (CHECK_MEANINGS, a finding's "check" field)
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "check":
                    hits += _constants(value)
        found += [f"{name}:{c.lineno}: {c.value!r}" for c in hits if isinstance(c.value, str) and c.value in CHECK_NAMES]
    return found


def _definitions() -> list[str]:
    return [f"{name}:{node.lineno}: {node.targets[0].id}" for name, _, tree in _trees() for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant) and CONSTANT_OF.get(node.value.value) == node.targets[0].id]


def test_check_names_are_written_only_as_their_constants():
    found = [x for name, text, tree in _trees() for x in _check_literals(name, text, tree)]
    assert found == []
    # each constant is defined once
    assert len(_definitions()) == len(CHECK_NAMES) == len(CONSTANT_OF), _definitions()


@pytest.mark.parametrize("snippet", [
    'def f(v):\n    return v.check == "pixel_mismatch"\n',
    'X = {"check": "crash"}\n',
    'def g(e):\n    return getattr(e, "check", "timeout")\n',
    'check = "crash"\n',
])
def test_the_literal_check_finds_what_it_looks_for(snippet):
    assert _check_literals("planted.py", snippet, ast.parse(snippet))


def test_the_path_rule_of_a_spec_and_the_start_timeout_have_one_home_each():
    # `core.specs.spec_path` decides whether a spec names a file; `core.defaults.start_timeout`
    # bounds a process's start by the budget. Written out again anywhere else, they drift.
    found = []
    for name, text, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "min" and any(
                    isinstance(a, ast.Name) and a.id == "START_TIMEOUT_S" for a in node.args):
                if name != "core/defaults.py":
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "endswith"
                    and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == ".py"
                    and name != "core/specs.py"):
                segment = ast.get_source_segment(text, node) or ""
                line = text.splitlines()[node.lineno - 1]
                if '"/" in' in line:
                    found.append(f"{name}:{node.lineno}: {segment} (the spec path rule)")
    assert not found, "use core.specs.spec_path / core.defaults.start_timeout:\n" + "\n".join(found)
