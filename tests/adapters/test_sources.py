"""ENGINE@SOURCE: a released version, a wheel, a site-packages directory, a checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_oracle.adapters.sources import cache_dir, locate, split_engine_spec, tree_version
from kimi_oracle.core.errors import CandidateError


def test_split_engine_spec():
    assert split_engine_spec("sglang") == ("sglang", None)
    assert split_engine_spec("sglang-cpu@0.5.23") == ("sglang-cpu", "0.5.23")
    assert split_engine_spec("sglang@/a/b@c") == ("sglang", "/a/b@c")


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KIMI_ORACLE_ENGINE_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("KIMI_ORACLE_ENGINE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "kimi-oracle" / "engines"


def test_a_release_states_its_own_version(sglang_tree, transformers_tree):
    # The versions the wheels' own metadata states (their .dist-info folders).
    assert (sglang_tree.version, sglang_tree.origin) == ("0.5.23", "release")
    assert transformers_tree.version == "5.23.0"
    assert (sglang_tree.package_dir / "srt" / "multimodal" / "processors" / "kimi_k25.py").is_file()


def test_a_wheel_file_is_unpacked_once(sglang_tree):
    wheel = next((cache_dir() / "wheels" / "sglang-0.5.23").glob("*.whl"))
    first = locate("sglang", "sglang", str(wheel))
    again = locate("sglang", "sglang", str(wheel))
    assert first.origin == "wheel" and first.root == again.root and first.version == "0.5.23"


def _package(root: Path, package: str, init: str = "") -> None:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text(init)


@pytest.mark.parametrize("layout, origin", [("", "directory"), ("python", "checkout"), ("src", "checkout")])
def test_directories_and_checkouts(tmp_path, layout, origin):
    _package(tmp_path / layout if layout else tmp_path, "sglang", '__version__ = "9.1"\n')
    tree = locate("sglang", "sglang", str(tmp_path))
    assert (tree.origin, tree.version, tree.package_dir.name) == (origin, "9.1", "sglang")
    assert locate("sglang", "sglang", str(tree.package_dir)).root == tree.root  # the package folder itself


def test_version_from_a_version_module(tmp_path):
    _package(tmp_path, "sglang")
    (tmp_path / "sglang" / "_version.py").write_text("__version__ = version = '0.6.0.dev3'\n")
    assert tree_version(tmp_path, "sglang") == "0.6.0.dev3"


@pytest.mark.parametrize("source, words", [
    ("NOPE/", "no such wheel, directory or released version"),
    ("EMPTY", "holds no package 'sglang'"),
    ("", "names no source"),
])
def test_bad_sources_are_one_line_errors(tmp_path, source, words):
    (tmp_path / "EMPTY").mkdir()
    arg = str(tmp_path / source) if source else ""
    with pytest.raises(CandidateError) as info:
        locate("sglang", "sglang", arg)
    assert words in str(info.value) and "\n" not in str(info.value) and info.value.exit_code == 2


def test_a_file_that_is_no_wheel(tmp_path):
    bad = tmp_path / "x.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(CandidateError, match="not a wheel"):
        locate("sglang", "sglang", str(bad))


def test_a_tree_another_process_published_first_is_kept(sglang_tree, tmp_path, monkeypatch):
    import kimi_oracle.adapters.sources as sources

    wheel = next((cache_dir() / "wheels" / "sglang-0.5.23").glob("*.whl"))
    monkeypatch.setenv("KIMI_ORACLE_ENGINE_CACHE", str(tmp_path))
    first = locate("sglang", "sglang", str(wheel))
    # the other process's rename happened between our check and ours: ours finds the folder there
    (first.root / "sglang" / "marker").write_text("theirs")
    staging = tmp_path / "staging"
    (staging / "sglang").mkdir(parents=True)
    sources._publish(staging, first.root)
    assert (first.root / "sglang" / "marker").read_text() == "theirs"
