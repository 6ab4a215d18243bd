"""`ENGINE@SOURCE` specs: a built-in engine's name, never a file of code, whatever SOURCE holds."""

from __future__ import annotations

import os

from kimi_oracle.core.specs import absolute_spec, spec_inside, spec_path


def test_an_engine_source_is_no_code_path():
    assert spec_path("sglang@/trees/main") is None
    assert spec_path("sglang-cpu@0.5.23") is None
    assert spec_path("plugins/x.py:fn") == "plugins/x.py"  # unchanged for files of code
    assert spec_path("my_dir@v2/x.py:fn") == "my_dir@v2/x.py"  # not an engine name (underscore)


def test_a_relative_source_is_recorded_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tree").mkdir()
    assert absolute_spec("sglang@tree") == f"sglang@{os.path.join(str(tmp_path), 'tree')}"
    assert absolute_spec("sglang@0.5.23") == "sglang@0.5.23"  # a version, not a path here


def test_a_source_inside_a_finding_folder_is_caught(tmp_path):
    (tmp_path / "finding" / "tree").mkdir(parents=True)
    assert spec_inside(f"sglang@{tmp_path / 'finding' / 'tree'}", tmp_path / "finding")
    assert not spec_inside("sglang@0.5.23", tmp_path / "finding")


def test_the_engine_names_are_the_adapters_engines():
    from kimi_oracle.adapters.engines import ENGINES
    from kimi_oracle.core.specs import ENGINE_NAMES

    assert set(ENGINE_NAMES) == set(ENGINES)
