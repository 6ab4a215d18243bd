"""`fuzz --json`'s `cpu`: the fuzzing process's CPU and the candidate's executors', per example."""

from __future__ import annotations

import json
import textwrap

from cli_run import exit_code_of


def test_cpu_split_counts_the_candidates_own_cpu(tmp_path):
    # A candidate that burns at least 20 ms of its own CPU per call (process time, so a busy
    # machine changes nothing), then answers as the reference does.
    burn = tmp_path / "burn.py"
    burn.write_text(textwrap.dedent("""
        import time
        from kimi_oracle.pipelines.reference import preprocess as reference

        def preprocess(images, config):
            t = time.process_time()
            while time.process_time() - t < 0.02:
                pass
            return reference(images, config)
    """))
    code = exit_code_of("fuzz", "--candidate", f"{burn}:preprocess", "--examples", "10", "--seed", "1",
                        "--out", tmp_path / "out", "--json", tmp_path / "run.json")
    assert code == 0
    cpu = json.loads((tmp_path / "run.json").read_text())["cpu"]
    assert cpu["candidate_ms_per_example"] >= 20.0  # >= 1 call an example, 20 ms each
    assert cpu["candidate_s"] >= 0.2 and cpu["oracle_s"] > 0
    assert abs(cpu["ratio"] - cpu["oracle_s"] / cpu["candidate_s"]) < 0.01
    # The search alone (no shrinking or publishing: nothing failed here, so the whole candidate
    # time is the search's): a part of the run's own CPU, the same candidate CPU.
    search = cpu["search"]
    assert 0 < search["oracle_s"] <= cpu["oracle_s"] + 1e-3
    assert abs(search["candidate_s"] - cpu["candidate_s"]) < 1e-3
