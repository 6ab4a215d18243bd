"""A CLI that starts at once (issue 26): help, usage errors and input refusals import no torch.

The modules are counted, not the time: one fresh interpreter runs each command line through
`kimi_oracle.cli.main` in turn and records, after each, whether a heavy module was imported
(the first command line that imports one is named). A control at the end imports the oracle's
checks, so the detection itself is seen to work.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "triton", "hypothesis", "atheris")

RUNNER = r"""
import json, sys
from kimi_oracle.cli import main
HEAVY = %r
out = []
for argv in json.loads(sys.argv[1]):
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out.append({"argv": argv, "code": code, "heavy": sorted(m for m in HEAVY if m in sys.modules)})
import kimi_oracle.oracle.checks  # the control: this one needs torch
out.append({"argv": ["<control>"], "code": 0, "heavy": sorted(m for m in HEAVY if m in sys.modules)})
print("RESULT " + json.dumps(out))
"""


def _bomb(path: Path) -> Path:
    # A 29-byte GIF whose one frame claims 65535 x 65535 pixels (4.3 Gpx): a decompression bomb.
    path.write_bytes(b"GIF89a" + struct.pack("<HHBBB", 65535, 65535, 0, 0, 0) + b","
                     + struct.pack("<HHHHB", 0, 0, 65535, 65535, 0) + b"\x02\x02\x44\x01\x00;")
    return path


@pytest.fixture(scope="module")
def startup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("startup")
    bomb = str(_bomb(tmp / "bomb.gif"))
    junk = tmp / "junk.png"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n not a png")
    bad_config = tmp / "bad.json"
    bad_config.write_text('{"patch_size": 14}')
    commands = {
        "help": (["--help"], 0),
        **{f"{c} --help": ([*c.split(), "--help"], 0) for c in
           ("explain", "fuzz", "repro", "check", "golden", "golden check", "golden regen", "nightly", "corpus",
            "bench", "gate", "gpu", "gpu build")},
        "unknown option": (["fuzz", "--bogus"], 2),
        "bad duration": (["fuzz", "--candidate", "eager", "--budget", "soon"], 2),
        "bad tolerance": (["fuzz", "--candidate", "eager", "--tolerance", "close"], 2),
        "bad modes": (["fuzz", "--candidate", "eager", "--modes", "XYZ"], 2),
        "bad margin": (["gate", "--candidate", "eager", "--margin", "lots"], 2),
        "engine with a budget": (["fuzz", "--engine", "sglang-0.5.23", "--budget", "1s"], 2),
        "gate without a candidate": (["gate"], 2),
        "gate bad tolerance": (["gate", "--candidate", "eager", "--tolerance", "close"], 2),
        "explain bomb": (["explain", bomb], 2),
        "explain junk": (["explain", str(junk)], 2),
        "explain missing": (["explain", str(tmp / "missing.png")], 2),
        "explain bad config": (["explain", "--config", str(bad_config), str(junk)], 2),
        "fuzz bad config": (["fuzz", "--candidate", "eager", "--config", str(bad_config)], 2),
        "nightly bad config": (["nightly", "--candidate", "eager", "--config", str(bad_config), "--budget", "1s",
                                "--out", str(tmp / "night")], 2),
        "check bomb": (["check", bomb, "--candidate", "eager", "--out", str(tmp / "check")], 2),
    }
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    argvs = [argv for argv, _ in commands.values()]
    proc = subprocess.run([sys.executable, "-c", RUNNER % (HEAVY,), json.dumps(argvs)], capture_output=True,
                          text=True, env=env, cwd=tmp, timeout=120)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads(line[len("RESULT "):])
    return commands, results


def test_help_usage_errors_and_refusals_import_no_torch(startup):
    commands, results = startup
    for (name, (_, code)), got in zip(commands.items(), results):
        assert got["heavy"] == [], f"{name!r} imported {got['heavy']}"
        assert got["code"] == code, f"{name!r} exited {got['code']}, expected {code}"


def test_the_count_can_see_torch(startup):
    _, results = startup
    assert results[-1]["argv"] == ["<control>"] and "torch" in results[-1]["heavy"]


ORCHESTRATION = r"""
import json, sys
from kimi_oracle.cli import common
import kimi_oracle.cli.nightly, kimi_oracle.workflows.nightly, kimi_oracle.workflows.nightly.worker
import kimi_oracle.workflows.nightly.merge
from kimi_oracle.core.interrupts import die_with_parent, kill_group, lead_own_group
out = {"modules": sorted(m for m in %r if m in sys.modules)}
common._GPU_NODES = ("/nonexistent/nvidia0",)
out["no_nodes"] = [common.cuda_visible(), "torch" in sys.modules]
common._GPU_NODES = ("/dev/null",)  # a node that exists: now only torch can answer
out["a_node"] = [common.cuda_visible(), "torch" in sys.modules]
print("RESULT " + json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="elsewhere torch is asked whether CUDA is visible")
def test_a_campaigns_runner_and_its_atheris_worker_import_no_torch():
    # The runner and the atheris worker only start and watch processes: each torch import they
    # skip is seconds of every nightly run. Without a GPU's device file, asking whether CUDA is
    # visible needs no torch either; with one, torch answers.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run([sys.executable, "-c", ORCHESTRATION % (HEAVY,)], capture_output=True, text=True,
                          env=env, timeout=120)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = json.loads(line[len("RESULT "):])
    assert got["modules"] == []
    assert got["no_nodes"] == [False, False]
    assert got["a_node"][1] is True
