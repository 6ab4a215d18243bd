"""Findings written by the harnesses and the runner: the raw fuzz input is part of the finding
from the moment it appears, and inputs that killed the harness are named by their bytes."""

from __future__ import annotations

import json
from pathlib import Path

from nightly_helpers import FUZZ, planted

from kimi_oracle.fuzzers.harnesses import Harness, HarnessSettings, PyFuzzedDataProvider, write_fuzz_finding
from kimi_oracle.inputs.corpus import entries
from kimi_oracle.workflows.nightly import write_harness_finding

SPEC = {"candidate": "reference", "profile": "k3-small", "config_path": None, "tolerance": "exact", "shard": [1, 1]}


def _no_write_after_publishing(monkeypatch) -> None:
    # The input is one of write_finding's extra files (written before its atomic rename; see
    # tests/results/test_report.py), never a separate file added to a published finding.
    # Every other file the tool records goes through core.files.atomic_write_many.
    import kimi_oracle.core.files as files

    def refuse(mapping):
        raise AssertionError(f"{list(mapping)} written outside the finding's atomic rename")

    monkeypatch.setattr(files, "atomic_write_many", refuse)


def test_oracle_finding_holds_its_fuzz_input_when_published(tmp_path, monkeypatch):
    _no_write_after_publishing(monkeypatch)
    harness = Harness("structured", HarnessSettings(candidate=planted("drops_last_row")))
    for path in entries(FUZZ / "corpus" / "structured"):
        data = path.read_bytes()
        outcome = harness.evaluate(data, PyFuzzedDataProvider(data))
        if outcome.status == "finding":
            break
    assert outcome.status == "finding"
    written = write_fuzz_finding(tmp_path, outcome, data, harness="structured", candidate=planted("drops_last_row"),
                                 tolerance="exact", signature="sig")
    assert (written / "fuzz-input.bin").read_bytes() == data
    case = json.loads((written / "case.json").read_text())
    assert case["fuzz_input"]["file"] == "fuzz-input.bin" and case["fuzz_input"]["bytes"] == len(data)


def test_harness_level_findings_are_named_by_their_input(tmp_path, monkeypatch):
    _no_write_after_publishing(monkeypatch)
    paths = [write_harness_finding(tmp_path, "decoder", raw, "crash", "the decoder harness process itself died",
                                   "(log)", SPEC, None)
             for raw in (b"\x89PNG\r\n\x1a\n one", b"\x89PNG\r\n\x1a\n two", b"\x89PNG\r\n\x1a\n one")]
    assert paths[0] != paths[1] and paths[0] == paths[2]
    assert sorted(p.name for p in (tmp_path / "findings").iterdir()) == sorted({p.name for p in paths})
    for p, raw in zip(paths, (b"\x89PNG\r\n\x1a\n one", b"\x89PNG\r\n\x1a\n two")):
        assert (p / "fuzz-input.bin").read_bytes() == raw
        assert json.loads((p / "case.json").read_text())["check"] == "crash"
