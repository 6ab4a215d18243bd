"""The architecture holds: layers import only downward, no import cycle anywhere (imports inside
functions included), every subpackage is in a layer, and `kimi_oracle.api` is the one short import path."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "kimi_oracle"


def _contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_import_linter_contracts_are_kept():
    assert lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True) == 0


def test_every_subpackage_and_top_module_is_in_a_layer():
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    named = {m.strip() for layer in layers for m in layer.split("|")}
    present = {f"kimi_oracle.{p.name}" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    present |= {f"kimi_oracle.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert present == named


def test_no_cycle_even_through_function_level_imports():
    # The acyclic contract, stated directly on the module graph: no module reaches itself.
    graph = grimp.build_graph("kimi_oracle", cache_dir=None)
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            assert not graph.chain_exists(imported, module), (module, imported,
                                                              graph.find_shortest_chain(imported, module))


def test_an_upward_import_breaks_the_contract(tmp_path):
    # The contract can fail: a copy of the package where core imports the CLI is rejected.
    import shutil

    copy = tmp_path / "kimi_oracle"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("golden_data", "__pycache__"))
    (copy / "core" / "geometry.py").write_text((copy / "core" / "geometry.py").read_text()
                                                + "\nfrom kimi_oracle.cli import common  # noqa\n")
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    proc = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"],
                          cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "kimi_oracle.core.geometry -> kimi_oracle.cli.common" in proc.stdout


def test_the_api_module_is_the_one_short_path():
    from kimi_oracle import api
    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.oracle.candidates import load_candidate
    from kimi_oracle.pipelines import gpu, reference

    # The same objects as their homes, not copies.
    assert api.PreprocessConfig is PreprocessConfig and api.load_candidate is load_candidate
    assert api.preprocess is reference.preprocess and api.gpu_preprocess is gpu.preprocess
    assert api.eager_preprocess is gpu.eager_preprocess
    cfg = api.PreprocessConfig.k3_small()
    candidate = api.load_candidate("reference")
    from PIL import Image

    out = candidate([Image.new("RGB", (30, 20), (10, 20, 30))], cfg)
    # 30x20 under k3-small: no resample, padded to 56x28 (multiples of 14 * 2): a 1x2x4 grid.
    assert out.grid_thws.tolist() == [[1, 2, 4]]
    assert api.preprocess([Image.new("RGB", (30, 20), (10, 20, 30))], cfg).grid_thws.tolist() == [[1, 2, 4]]
    # Importing the api never imports triton (a GPU call without a backend raises).
    proc = subprocess.run([sys.executable, "-c", "import sys, kimi_oracle.api; print('triton' in sys.modules)"],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr


def test_the_old_top_level_shims_are_gone():
    # The package's only top-level modules are __init__, __main__ and api (the file, not an
    # import: an editable install of another checkout could still resolve the old names).
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py", "api.py"]


def test_entry_points_run():
    for argv in ([sys.executable, "-m", "kimi_oracle", "--version"],
                 [sys.executable, "-m", "kimi_oracle.fuzzers.atheris_entry"]):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert proc.returncode in (0, 2), proc.stderr
    proc = subprocess.run([sys.executable, "-m", "kimi_oracle.fuzzers.atheris_entry"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "structured,decoder" in proc.stderr
    from importlib import metadata

    eps = {ep.name: ep.value for ep in metadata.entry_points(group="pytest11")}
    assert eps.get("kimi_oracle.cli.pytest_plugin") == "kimi_oracle.cli.pytest_plugin"
    scripts = {ep.name: ep.value for ep in metadata.entry_points(group="console_scripts")}
    assert scripts.get("kimi-oracle") == "kimi_oracle.cli:main"
