"""Planted one-line defects in a copy of SGLang 0.5.23's released tree, each gated against the
unmodified copy: the gate fails, and every failing row names the edited step's family (the
change from OLD to NEW, `workflows.gate.changes`), the measured parameter included.

Each defect is one line of the release's source edited on disk (no monkeypatch); two are reached
only by batches whose images share a target size (SGLang groups a call's images by it): the
gate's invariance batches hold two 61x45 RGB images of different content. The pad defect runs in
the default suite; the others are `slow` (a gate each, 2-20 s here).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kimi_oracle.adapters.sglang import K25_FILE, K3_FILE, KERNEL_FILES
from kimi_oracle.workflows.gate import Gate, GateOptions

KERNEL = "kernels/ops/mm/process/image.py"
K25 = K25_FILE
K3 = K3_FILE
# id -> (file, the release's text, the planted text, the family every failing row must name,
#        a variant the rows' changes must include)
DEFECTS = {
    "pad-one-level-brighter": (KERNEL, "value=0.0)", "value=1.0)", "pad", "level-1"),
    "pad-on-the-other-sides": (KERNEL, "(0, pad_width, 0, pad_height)", "(pad_width, 0, pad_height, 0)",
                               "pad", "pad-top-left"),
    "patch-axes-swapped": (KERNEL, "permute(0, 2, 4, 1, 3, 5)", "permute(0, 2, 4, 1, 5, 3)",
                           "patch-order", "patch-transposed"),
    "grid-column-major": (KERNEL, "permute(0, 2, 4, 1, 3, 5)", "permute(0, 4, 2, 1, 3, 5)",
                          "patch-order", "patches-column-major"),
    "mean-off-by-0.01": (K3, "[-mean / std for mean, std", "[-(mean + 0.01) / std for mean, std",
                         "normalize-float", "mean-0.51,0.51,0.51-fused"),
    "resize-truncated": (K25, ".round_()", ".floor_()", "resample-float", "torch-bicubic-antialias-truncated"),
    "resize-without-antialias": (K25, "antialias=True,", "antialias=False,", "resample-float", "torch-bicubic"),
    "composite-rounded": (K3, ".clamp(0.0, 255.0).floor_()", ".clamp(0.0, 255.0).round_()",
                          "composite-rounding", "round-half-even"),
    # batch-only: same source shape resized together / one target-size group normalized together
    "batch-rows-of-the-first-image": (K25, "resized_batch[local_index : local_index + 1]", "resized_batch[0:1]",
                                      "patch-order", "rows-of-image-0"),
    "batch-channels-reversed": (K25, "batch = torch.cat(resized, dim=0)", "batch = torch.cat(resized, dim=0).flip(1)",
                                "patch-order", "channels-bgr"),
}
CASES = {"RGB/opaque", "RGBA/checker", "RGBA/random", "LA/random", "P/opaque", "L/opaque", "I;16/opaque",
         "LA/gradient", "PA/random", "CMYK/opaque", "side_cap/I;16/opaque"}
# (the side-capped 16-bit case: OLD exact there, so a one-level resize change is `new`, not within
# the margin of OLD's own resize levels)
SMALL_CASES = {"RGB/opaque", "RGBA/checker"}  # the default suite's gate
DEFAULT = "pad-one-level-brighter"


def _tree_copy(tree, dest: Path) -> Path:
    for relative in ("__init__.py", K25_FILE, K3_FILE, *KERNEL_FILES):
        target = dest / "sglang" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree.file(relative), target)
    return dest


@pytest.fixture(scope="module")
def original(sglang_tree, tmp_path_factory):
    return _tree_copy(sglang_tree, tmp_path_factory.mktemp("main"))


def _planted(sglang_tree, base: Path, defect: str) -> Path:
    relative, before, after, _, _ = DEFECTS[defect]
    branch = _tree_copy(sglang_tree, base / "branch")
    path = branch / "sglang" / relative
    text = path.read_text()
    assert text.count(before) == 1, f"{defect}: the release's line is not where the test expects it"
    path.write_text(text.replace(before, after))
    return branch


def _gate(new: Path, old: Path, out: Path, cases: set[str] = CASES) -> dict:
    options = GateOptions(budget_s=1.0, seed=5, fuzz_examples=3, fuzz_shrink=False, perf_rounds=1,
                          perf_threshold_pct=1e6, golden_select=lambda case: case.id in cases)
    return Gate(f"sglang@{new}", f"sglang@{old}", options, out).run()


def _check(report: dict, defect: str, out: Path) -> None:
    _, _, _, family, variant = DEFECTS[defect]
    assert report["verdict"] == "fail", report["reasons"][:5]
    failing = [r for r in report["rows"] if r["fails"]]
    assert failing and {r["root_cause"] for r in failing} == {family}, [
        (r["root_cause"], r["mode_class"], r["verdict"]) for r in failing]
    named = {v for r in failing if r.get("change") for v in r["change"]["variants"]}
    assert f"{family}/{variant}" in named, named
    assert report["what_changed"] and report["what_changed"][0]["family"] == family
    # the Markdown opens with what changed
    head = (out / "gate-report.md").read_text().splitlines()[:6]
    assert head[2] == "## What changed from the baseline" and f"`{family}/" in head[4], head


def test_a_pad_one_level_brighter_is_named_pad_level_1(sglang_tree, original, tmp_path):
    branch = _planted(sglang_tree, tmp_path, DEFAULT)
    report = _gate(branch, original, tmp_path / "gate", SMALL_CASES)
    _check(report, DEFAULT, tmp_path / "gate")
    row = next(r for r in report["rows"] if r["fails"])
    assert row["change"]["where"]["confined_to"] == ["pad"] and abs(row["change"]["levels"]["max"] - 1.0) < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("defect", [d for d in DEFECTS if d != DEFAULT])
def test_each_planted_defect_is_named_by_its_family(sglang_tree, original, tmp_path, defect):
    branch = _planted(sglang_tree, tmp_path, defect)
    _check(_gate(branch, original, tmp_path / "gate"), defect, tmp_path / "gate")
