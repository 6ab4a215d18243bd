"""Engines plug in: the `kimi_oracle.candidates` entry-point group names candidates and planners.

The default test puts a distribution's metadata (`*.dist-info/entry_points.txt`) on sys.path, so
the real `importlib.metadata` discovery finds it; the slow test builds the same tiny package,
`pip install --target`s it and runs the CLI on it in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.oracle.candidates import ENTRY_POINT_GROUP, entry_points, load_candidate
from kimi_oracle.oracle.judge import evaluate
from kimi_oracle.oracle.planner import check_sizes, load_planner

ENGINE = textwrap.dedent('''
    """A tiny engine: the reference's pixels, a planner that rounds instead of truncating."""
    from kimi_oracle.core.geometry import plan as _plan
    from kimi_oracle.pipelines.reference import preprocess as _preprocess


    def plan(width, height, config):
        p = _plan(width, height, config)
        return {"num_tokens": p.num_tokens, "new_width": p.new_w, "new_height": p.new_h,
                "pad_width": p.pad_w, "pad_height": p.pad_h}


    def preprocess(images, config):
        return _preprocess(images, config)


    def bad_plan(width, height, config):
        out = plan(width, height, config)
        out["num_tokens"] += 1
        return out
''')
ENTRY_POINTS = textwrap.dedent(f"""
    [{ENTRY_POINT_GROUP}]
    demo-engine = kimi_demo_engine_ep
    demo-bad-plan = kimi_demo_engine_ep:bad_plan
    demo-broken = kimi_demo_engine_ep_missing
""")


def _site(root: Path) -> Path:
    site = root / "site"
    (site / "kimi_demo_engine_ep").mkdir(parents=True)
    (site / "kimi_demo_engine_ep" / "__init__.py").write_text(ENGINE)
    info = site / "kimi_demo_engine_ep-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kimi-demo-engine-ep\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def test_installed_entry_points_name_candidates_and_planners(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(_site(tmp_path)))
    assert {"demo-engine", "demo-bad-plan", "demo-broken"} <= set(entry_points())
    cfg = PreprocessConfig.profile("k3-small")
    engine = load_candidate("demo-engine")
    assert engine.plan is not None  # a module with plan and preprocess: self-checked
    assert evaluate(engine, [Image.new("RGBA", (50, 20), (1, 2, 3, 4))], cfg).ok
    assert check_sizes(load_planner("demo-engine"), [(640, 480, cfg, None)]).ok
    report = check_sizes(load_planner("demo-bad-plan"), [(640, 480, cfg, None)])
    [finding] = report.findings.values()
    assert finding.field == "num_tokens" and finding.size == (640, 480)
    with pytest.raises(CandidateError, match="entry point 'kimi_demo_engine_ep_missing'.*cannot be loaded"):
        load_candidate("demo-broken")
    with pytest.raises(CandidateError, match="bad candidate spec 'demo-nothing': not a built-in"):
        load_candidate("demo-nothing")


@pytest.mark.slow
def test_pip_installed_distribution_runs_from_the_cli(tmp_path):
    src = tmp_path / "src"
    (src / "kimi_demo_engine_ep").mkdir(parents=True)
    (src / "kimi_demo_engine_ep" / "__init__.py").write_text(ENGINE)
    (src / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "kimi-demo-engine-ep"
        version = "0.1"

        [project.entry-points."{ENTRY_POINT_GROUP}"]
        demo-engine = "kimi_demo_engine_ep"
        demo-bad-plan = "kimi_demo_engine_ep:bad_plan"

        [tool.setuptools]
        packages = ["kimi_demo_engine_ep"]
    """))
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(src)], check=True, timeout=300)
    image = tmp_path / "img.png"
    Image.new("RGB", (33, 17), (5, 6, 7)).save(image)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-m", "kimi_oracle", "check", str(image), "--candidate", "demo-engine",
                          "--profile", "k3-small", "--json", str(tmp_path / "c.json"), "--out", str(tmp_path / "o")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((tmp_path / "c.json").read_text())["candidate"] == "demo-engine"
    run = subprocess.run([sys.executable, "-m", "kimi_oracle", "golden", "check", "--planner", "demo-bad-plan",
                          "--profile", "k25", "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    fields = {f["field"] for f in json.loads(run.stdout)["findings"]}
    assert fields == {"num_tokens"}
