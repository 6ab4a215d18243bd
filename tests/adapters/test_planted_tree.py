"""Gate a branch of SGLang against its main: a copy of the released tree with one file edited on
disk (no monkeypatch) fails against the unmodified copy naming a `new` root cause; the
unmodified copy against itself passes. Each tree loads in its own candidate process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kimi_oracle.adapters.sglang import K25_FILE, K3_FILE, KERNEL_FILES
from kimi_oracle.workflows.gate import Gate, GateOptions

KERNEL = "kernels/ops/mm/process/image.py"
# The planted defect: SGLang's own patchify reads the channels in reverse order (B, G, R), which
# the catalogue calls `patch-order` (variant `channels-bgr`); the release reads R, G, B.
ORIGINAL = "    return image.permute(0, 2, 4, 1, 3, 5).reshape("
PLANTED = "    return image.flip(1).permute(0, 2, 4, 1, 3, 5).reshape("
CASES = {"RGB/opaque", "RGBA/checker"}


def _tree_copy(tree, dest: Path) -> Path:
    """A site-packages-style copy of the files the candidate loads (and the package marker)."""
    for relative in ("__init__.py", K25_FILE, K3_FILE, *KERNEL_FILES):
        target = dest / "sglang" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree.file(relative), target)
    return dest


def _gate(new: str, old: str, out: Path) -> dict:
    options = GateOptions(budget_s=1.0, seed=5, fuzz_examples=3, fuzz_shrink=False, perf_rounds=1,
                          perf_threshold_pct=1e6, golden_select=lambda case: case.id in CASES)
    return Gate(new, old, options, out).run()


@pytest.fixture(scope="module")
def trees(sglang_tree, tmp_path_factory):
    base = tmp_path_factory.mktemp("trees")
    original = _tree_copy(sglang_tree, base / "main")
    branch = _tree_copy(sglang_tree, base / "branch")
    kernel = branch / "sglang" / KERNEL
    text = kernel.read_text()
    assert text.count(ORIGINAL) == 1
    kernel.write_text(text.replace(ORIGINAL, PLANTED))
    return original, branch, base


def test_a_planted_defect_in_a_tree_copy_fails_the_gate_naming_it_new(trees):
    original, branch, base = trees
    report = _gate(f"sglang@{branch}", f"sglang@{original}", base / "gate-branch")
    assert report["verdict"] == "fail", report["reasons"][:5]
    failing = [r for r in report["rows"] if r["fails"]]
    assert failing and {r["root_cause"] for r in failing} == {"patch-order"}, failing
    assert all(r["verdict"] == "new" for r in failing)


def test_the_unmodified_copy_against_itself_passes(trees):
    original, _, base = trees
    report = _gate(f"sglang@{original}", f"sglang@{original}", base / "gate-same")
    assert report["verdict"] == "pass", report["reasons"][:5]
