"""The workflows on CUDA, a step of the device check (issue 45): the commands users run on a GPU
machine, each as `python -m kimi_oracle ...` in its own process, with its exit code and figures.

- `fuzz --candidate gpu` with each oracle (`--oracle reference`, `--oracle gpu`) on the same seed
  and example count: examples per second with each (0 findings expected: the GPU pipeline is
  exact);
- `fuzz --candidate sglang@TREE`: SGLang's own deferred path on CUDA tensors (its Triton kernel),
  from the pruned release carried with the run (`kimi-oracle engines --prune`, `SGLANG_TREE`);
- `gate --candidate gpu --baseline eager --budget 2m` (its timing by CUDA events, its verdict,
  its time split in gate-report.json);
- `bench --quick --candidate gpu --candidate eager --save` (pytest-benchmark JSON);
- `nightly --jobs 2` for a short budget.

`workflows(out, tree)` lists them (the dry run prints them); `run_workflows(results, out)` runs
them in turn, each in its own process group killed at its timeout (415 s in all at most: the
issue's 8 minutes for the new parts), recorded as it ends, skipping what no longer fits the run's
deadline, and keeps going after a failure. The fuzz runs have budgets, so each writes its JSON
before its timeout; both oracles get the same 30 s, seed and 512-pixel sides: their rates compare.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FUZZ_EXAMPLES = "200"
ORACLE_BUDGET = "30s"  # each oracle's rate: examples in the same time, same seed and candidate
SEED = "1"
# Where the device run finds the pruned SGLang tree (carried with it): $SGLANG_TREE, else this.
DEFAULT_TREE = Path("device-carry") / "sglang-tree"


@dataclass(frozen=True)
class Workflow:
    name: str
    args: tuple[str, ...]
    json_path: Path | None
    timeout_s: float


def sglang_tree() -> Path | None:
    """The pruned SGLang tree this run carries, or None."""
    tree = Path(os.environ.get("SGLANG_TREE") or DEFAULT_TREE)
    return tree if (tree / "sglang" / "__init__.py").is_file() else None


def workflows(out: Path, tree: Path | None) -> list[Workflow]:
    """The commands, writing under `out` (the SGLang one only with a tree). Each fuzz run has a
    budget, which covers its shrinking and writing, so its JSON is written before its timeout."""
    rate = ("fuzz", "--budget", ORACLE_BUDGET, "--seed", SEED, "--max-side", "512", "--no-interpret")
    found = [Workflow(f"fuzz gpu, {oracle} oracle", (*rate, "--candidate", "gpu", "--oracle", oracle, "--out",
                                                     str(out / f"fuzz-{oracle}"), "--json", str(out / f"fuzz-{oracle}.json")),
                      out / f"fuzz-{oracle}.json", 50) for oracle in ("reference", "gpu")]
    if tree is not None:
        found.append(Workflow("fuzz sglang on CUDA", ("fuzz", "--examples", FUZZ_EXAMPLES, "--budget", "40s", "--seed",
                                                      SEED, "--no-interpret", "--candidate", f"sglang@{tree}", "--out",
                                                      str(out / "fuzz-sglang"), "--json", str(out / "fuzz-sglang.json")),
                              out / "fuzz-sglang.json", 60))
    found += [
        Workflow("gate gpu vs eager", ("gate", "--candidate", "gpu", "--baseline", "eager", "--budget", "2m", "--seed",
                                       SEED, "--no-interpret", "--out", str(out / "gate")),
                 out / "gate" / "gate-report.json", 150),
        Workflow("bench", ("bench", "--quick", "--input", "rgb-1920x1080", "--candidate", "gpu", "--candidate", "eager",
                           "--save", "device", "--storage", str(out / "bench")), out / "bench" / "device.json", 45),
        Workflow("nightly --jobs 2, gpu oracle", ("nightly", "--jobs", "2", "--budget", "40s", "--candidate", "gpu",
                                                  "--oracle", "gpu", "--seed", SEED, "--no-interpret", "--out",
                                                  str(out / "nightly")),
                 out / "nightly" / "summary.json", 60),
    ]
    return found


def parse_errors(found: list[Workflow]) -> list[str]:
    """The commands the CLI would refuse (click's own parse, nothing run; `cli.parse_check` in a
    process of its own): for the dry run."""
    proc = subprocess.run([sys.executable, "-m", "kimi_oracle.cli.parse_check"], capture_output=True, text=True,
                          input=json.dumps([list(flow.args) for flow in found]), timeout=120)
    if proc.returncode != 0:
        return [f"the parse check failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"]
    return json.loads(proc.stdout)


def figures(data: dict[str, Any] | None) -> dict[str, Any]:
    """What the report keeps of a command's JSON: its scalar fields, time split, oracle, and the
    examples per second of a fuzz run."""
    if not isinstance(data, dict):
        return {}
    kept: dict[str, Any] = {k: v for k, v in data.items() if isinstance(v, (int, float, str, bool)) or v is None}
    for key in ("time", "oracle", "verdict", "counts", "timing"):
        if key in data:
            kept[key] = data[key]
    if isinstance(data.get("findings"), list):
        kept["findings"] = len(data["findings"])
    if isinstance(data.get("examples"), int) and data.get("elapsed_s"):
        kept["examples_per_s"] = round(data["examples"] / float(data["elapsed_s"]), 2)
    return kept


def run_one(flow: Workflow) -> dict[str, Any]:
    """One command in its own process group: exit code (None when the group was killed at its
    timeout: pytest under `bench`, nightly's workers with it), seconds, figures, its output's tail."""
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kimi_oracle", *flow.args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=flow.timeout_s)
        code, tail = proc.returncode, output.decode("utf-8", "replace")[-1500:]
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        output, _ = proc.communicate()
        code, tail = None, f"killed after {flow.timeout_s:.0f} s: " + output.decode("utf-8", "replace")[-1000:]
    data = None
    if flow.json_path is not None and flow.json_path.is_file():
        try:
            data = json.loads(flow.json_path.read_text("utf-8"))
        except (OSError, ValueError):
            data = None
    return {"name": flow.name, "command": "kimi-oracle " + " ".join(flow.args), "exit_code": code,
            "seconds": round(time.monotonic() - began, 1), "figures": figures(data), "log_tail": tail}


def run_workflows(results: dict[str, Any], out: Path, deadline: float | None = None,
                  write: Any = None) -> None:
    """The step: every workflow in turn (a failure does not stop the next), each recorded (and
    `write(results)` called) as soon as it ends; one whose timeout no longer fits before
    `deadline` (time.monotonic) is skipped, said so."""
    tree = sglang_tree()
    section: dict[str, Any] = {"sglang_tree": str(tree) if tree else None, "runs": [], "skipped": []}
    results["workflows"] = section
    for flow in workflows(out / "workflows", tree):
        if deadline is not None and time.monotonic() + flow.timeout_s > deadline:
            section["skipped"].append(f"{flow.name}: its {flow.timeout_s:.0f} s no longer fit the run's time")
            continue
        section["runs"].append(run_one(flow))
        if write is not None:
            write(results)


def workflow_lines(section: dict[str, Any] | None) -> list[str]:
    """The step's Markdown table."""
    if not section:
        return []
    lines = ["", "## Workflows on CUDA", "", f"SGLang tree: {section.get('sglang_tree') or 'none carried'}", "",
             "| workflow | exit | s | figures |", "|---|---|---|---|"]
    for skipped in section.get("skipped") or []:
        lines.append(f"| skipped: {skipped} | - | - | - |")
    for run in section["runs"]:
        fig = run["figures"]
        shown = {k: fig[k] for k in ("examples", "examples_per_s", "findings", "verdict", "stopped") if k in fig}
        lines.append(f"| {run['name']} | {run['exit_code']} | {run['seconds']} | {json.dumps(shown)} |")
    return lines


__all__ = ["DEFAULT_TREE", "Workflow", "figures", "parse_errors", "run_one", "run_workflows", "sglang_tree", "workflow_lines",
           "workflows"]
