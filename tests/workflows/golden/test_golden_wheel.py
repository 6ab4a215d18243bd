"""The goldens ship inside the wheel: `golden check` works from an installed package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from golden_testlib import edit_entry, snapshot

from kimi_oracle.workflows import golden

ROOT = Path(__file__).resolve().parents[3]


def test_package_data_globs_cover_every_golden_file():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = data["tool"]["setuptools"]["package-data"]["kimi_oracle"]
    pkg = ROOT / "kimi_oracle"
    shipped = {p for g in globs for p in pkg.glob(g)}
    committed = set(golden.package_golden_dir().glob("*/*.jsonl"))
    assert len(committed) == 9 and committed <= shipped  # 2 kinds x 4 profiles, and video of k25
    assert not any(p.name.endswith(".obtained") for p in shipped)
    assert golden.package_golden_dir() / "manifest.json" in shipped  # checked before any candidate runs


def test_check_from_an_installed_wheel(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copytree(ROOT / "kimi_oracle", src / "kimi_oracle",
                    ignore=shutil.ignore_patterns("__pycache__", "*.obtained", ".*"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("*.whl")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(site), str(wheel)], check=True, capture_output=True, timeout=300)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")

    def run(*args):
        return subprocess.run([sys.executable, *args], cwd=run_dir, env=env, capture_output=True,
                              text=True, timeout=300)

    where = run("-c", "import kimi_oracle.workflows.golden as g; print(g.default_golden_dir())")
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()) == site / "kimi_oracle" / "golden_data"
    ok = run("-m", "kimi_oracle", "golden", "check", "--kind", "grids")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "all 4 files match" in ok.stdout
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(site / "kimi_oracle" / "golden_data", elsewhere)
    edit_entry(elsewhere / "grids" / "k3.jsonl", "grids", "640x480", lambda e: e.update(num_tokens=7))
    package_before = snapshot(site / "kimi_oracle")
    bad = run("-m", "kimi_oracle", "golden", "check", "--kind", "grids", "--golden-dir", str(elsewhere))
    assert bad.returncode == 1 and "~ 640x480 [real_world]" in bad.stdout
    assert (run_dir / "kimi-oracle-out" / "golden" / "grids" / "k3.jsonl.obtained").is_file()
    # A candidate check against the shipped goldens writes its report into the current
    # directory, never into the installed package.
    cand = run("-m", "kimi_oracle", "golden", "check", "--kind", "pixels", "--profile", "k3-small",
               "--candidate", "reference")
    assert cand.returncode == 0, cand.stdout + cand.stderr
    assert snapshot(site / "kimi_oracle") == package_before, "golden check wrote into the installed package"
