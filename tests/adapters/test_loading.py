"""One file of a real engine's tree run as shipped, stand-ins for its infrastructure imports."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from kimi_oracle.adapters.loading import load_module, require
from kimi_oracle.adapters.sources import locate
from kimi_oracle.core.errors import CandidateError

K25 = "srt/multimodal/processors/kimi_k25.py"
SIGNATURE = ("width", "height", "patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side",
             "fixed_output_tokens")


def _copy(tree, dest: Path, edit=None) -> Path:
    """A site-packages-style copy holding SGLang's package marker and the planner's file."""
    (dest / "sglang" / Path(K25).parent).mkdir(parents=True)
    (dest / "sglang" / "__init__.py").write_text('__version__ = "0.5.23+copy"\n')
    text = tree.file(K25).read_text()
    (dest / "sglang" / K25).write_text(edit(text) if edit else text)
    return dest


def test_the_released_planner_runs_and_leaves_no_stand_in_behind(sglang_tree):
    module = load_module(sglang_tree, K25)
    func = require(module, sglang_tree, K25, "navit_resize_config", SIGNATURE, ("0.5.23",))
    # 1000x700 with patch 14, merge 2 (K3): no downscale; width pads 1000 -> 1008 (36 x 28), height
    # 700 is 25 x 28 already: 36 * 25 = 900 tokens (worked by hand).
    assert func(1000, 700, 14, 2, 65536, 512) == {
        "num_tokens": 900, "new_width": 1000, "new_height": 700, "pad_width": 8, "pad_height": 0}
    assert "sglang.srt.environ" in module.__kimi_stand_ins__
    assert not [name for name in sys.modules if name.split(".")[0] in ("sglang", "monkeytype")]


def test_two_trees_in_one_process_do_not_cross_talk(sglang_tree, tmp_path):
    planted = _copy(sglang_tree, tmp_path / "planted",
                    lambda text: text.replace("factor = merge_kernel_size * patch_size",
                                              "factor = merge_kernel_size * patch_size * 2", 1))
    copy = locate("sglang", "sglang", str(planted))
    theirs = require(load_module(copy, K25), copy, K25, "navit_resize_config", SIGNATURE, ("0.5.23",))
    ours = require(load_module(sglang_tree, K25), sglang_tree, K25, "navit_resize_config", SIGNATURE, ("0.5.23",))
    assert ours(1000, 700, 14, 2, 65536, 512)["pad_height"] == 0
    assert theirs(1000, 700, 14, 2, 65536, 512)["pad_height"] == 28  # 700 -> 728 = 13 x 56


@pytest.mark.parametrize("edit, words", [
    (lambda t: t.replace("def navit_resize_config(", "def navit_resize_config_v2(", 1),
     "no function navit_resize_config()"),
    (lambda t: t.replace("    fixed_output_tokens: int | None = None,\n", "", 1).replace(
        "if fixed_output_tokens is not None", "if False", 1).replace("num_tokens = fixed_output_tokens", "pass", 1),
     "takes no parameter fixed_output_tokens"),
])
def test_a_tree_without_the_function_is_one_exit_2_line(sglang_tree, tmp_path, edit, words):
    copy = locate("sglang", "sglang", str(_copy(sglang_tree, tmp_path / "c", edit)))
    with pytest.raises(CandidateError) as info:
        require(load_module(copy, K25), copy, K25, "navit_resize_config", SIGNATURE, ("0.5.23",))
    message = str(info.value)
    assert words in message and str(copy.file(K25)) in message and "knows 0.5.23" in message
    assert "0.5.23+copy" in message and "\n" not in message and info.value.exit_code == 2


def test_a_missing_file_names_the_tree(sglang_tree, tmp_path):
    copy = locate("sglang", "sglang", str(_copy(sglang_tree, tmp_path / "c")))
    shutil.rmtree(copy.package_dir / "srt")
    with pytest.raises(CandidateError, match="no file sglang/srt/multimodal/processors/kimi_k25.py"):
        load_module(copy, K25)
