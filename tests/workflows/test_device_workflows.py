"""The workflows on CUDA as a device-check step (issue 45), without a device: which commands run,
their figures read from their JSON, a command's exit code and its timeout, the report's table."""

from __future__ import annotations

from pathlib import Path

from kimi_oracle.workflows import device_check
from kimi_oracle.workflows.device_workflows import Workflow, figures, run_one, workflow_lines, workflows


def test_the_commands_with_and_without_a_carried_sglang_tree(tmp_path):
    names = [w.name for w in workflows(tmp_path, None)]
    assert names == ["fuzz gpu, reference oracle", "fuzz gpu, gpu oracle", "gate gpu vs eager", "bench",
                     "nightly --jobs 2, gpu oracle"]
    flows = {w.name: w for w in workflows(tmp_path, Path("/carried/sglang-tree"))}
    assert "--candidate sglang@/carried/sglang-tree" in " ".join(flows["fuzz sglang on CUDA"].args)
    ref, gpu = (list(flows[f"fuzz gpu, {o} oracle"].args) for o in ("reference", "gpu"))
    # the two rates are comparable: the same candidate, seed and examples, only the oracle differs
    assert ref[:8] == gpu[:8] and ref[ref.index("--oracle") + 1] == "reference" and gpu[gpu.index("--oracle") + 1] == "gpu"
    assert flows["gate gpu vs eager"].args[:7] == ("gate", "--candidate", "gpu", "--baseline", "eager", "--budget", "2m")
    # killed at their timeouts, the new parts end within 8 minutes, leaving the check's own part
    # (~2 minutes) inside the device tool's 600 s a call
    assert sum(w.timeout_s for w in flows.values()) <= 8 * 60


def test_figures_and_a_commands_exit_code_and_timeout(tmp_path):
    got = figures({"examples": 300, "elapsed_s": 12.0, "findings": [{}, {}], "oracle": {"oracle": "gpu"},
                   "stopped": "examples", "config": {"patch_size": 14}})
    assert got == {"examples": 300, "elapsed_s": 12.0, "findings": 2, "oracle": {"oracle": "gpu"},
                   "stopped": "examples", "examples_per_s": 25.0}
    ok = run_one(Workflow("engines", ("engines", "--json"), None, 120))
    assert ok["exit_code"] == 0 and ok["command"] == "kimi-oracle engines --json"
    slow = run_one(Workflow("too slow", ("fuzz", "--candidate", "reference", "--examples", "100000"), None, 0.5))
    assert slow["exit_code"] is None and slow["log_tail"].startswith("killed after")


def test_the_report_has_the_workflows_table(tmp_path):
    section = {"sglang_tree": None, "runs": [{"name": "fuzz gpu, gpu oracle", "exit_code": 0, "seconds": 20.5,
                                              "figures": {"examples": 300, "examples_per_s": 14.6, "findings": 0}}]}
    lines = workflow_lines(section)
    assert '| fuzz gpu, gpu oracle | 0 | 20.5 | {"examples": 300, "examples_per_s": 14.6, "findings": 0} |' in lines
    device_check.write({"versions": {}, "workflows": section}, tmp_path)
    assert "## Workflows on CUDA" in (tmp_path / "device_check.md").read_text()
