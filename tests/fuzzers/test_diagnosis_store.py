"""The diagnosis cache (`<db>-diagnoses/`) is a hint, never a verdict: a forged entry is measured
again and replaced by the true diagnosis; entries that are FIFOs or /dev/zero links are passed
over unread, the run going on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.fuzzers.publishing import DiagnosisStore, Publisher, result_digest
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.checks import compare
from kimi_oracle.oracle.diagnosis import finding_diagnosis
from kimi_oracle.pipelines.reference import preprocess

PLUS_HALF_RANGE = textwrap.dedent("""
    from kimi_oracle.core.result import PreprocessResult
    from kimi_oracle.pipelines.reference import preprocess as reference

    def plus_one(images, config):
        out = reference(images, config)
        return PreprocessResult(out.pixel_values + 1.0, out.grid_thws)
""")


def _fuzz(tmp_path, out: str) -> tuple[int, dict, str]:
    # In its own process, bounded: a run that hung on a cache entry would fail here, not hang the suite.
    proc = subprocess.run([sys.executable, "-m", "kimi_oracle", "fuzz", "--candidate",
                           f"{tmp_path / 'kernel.py'}:plus_one", "--examples", "2", "--seed", "4", "--fixed-config", "--no-shrink",
                           "--out", str(tmp_path / out), "--db", str(tmp_path / "db"), "--json", str(tmp_path / f"{out}.json")],
                          capture_output=True, text=True, timeout=300)
    doc = json.loads((tmp_path / f"{out}.json").read_text()) if (tmp_path / f"{out}.json").exists() else {}
    return proc.returncode, doc, proc.stdout + proc.stderr


def _pixel(doc: dict) -> dict:
    return next(f for f in doc["findings"] if f["check"] == "pixel_mismatch")


FORGED = {"root_causes": ["normalize-float"], "max_levels": 0.4, "mean_levels": 0.4, "residual_max_levels": 0.0,
          "residual_mean_levels": 0.0,
          "attribution": {"root_causes": ["normalize-float"], "explanation": "explained",
                          "variants": ["normalize-float/float16"], "images": [0], "assumed": []}}
CASE_KEY = (b"namespace", (3, 1, 4))


def _plus_one_case():
    config = PreprocessConfig.profile("k3")
    img = make_image(CaseParams(40, 30, "RGB", content="noise", seed=7))
    expected = preprocess([img], config)
    verdict = compare(expected, PreprocessResult(expected.pixel_values + 1.0, expected.grid_thws), config,
                      sizes=[img.size])
    key = DiagnosisStore.key(CASE_KEY[0], CASE_KEY[1], (result_digest(verdict.actual), result_digest(verdict.expected)))
    return config, img, verdict, key


def test_a_forged_entry_is_a_hint_diagnosed_anew(tmp_path):
    config, img, verdict, key = _plus_one_case()
    publisher = Publisher(lambda: 0.0, tmp_path / "db", share=None)
    publisher.store.put(key, FORGED)
    assert publisher.store.get(key) == FORGED  # the forgery is read back: only its check stops it
    fields = publisher.diagnose(verdict, [img], config, CASE_KEY, None, finding_diagnosis)
    assert fields["max_levels"] == 127.5  # +1.0 at std 0.5: half of 255 levels (a hand calculation)
    assert fields["root_causes"] != ["normalize-float"]
    assert publisher.store.get(key)["max_levels"] == 127.5  # the entry rewritten with the truth


def _get_bounded(store: DiagnosisStore, key: str):
    # In a thread joined with a bound: a read that blocked on a FIFO fails here, not hangs the suite.
    out: list = []
    worker = threading.Thread(target=lambda: out.append(store.get(key)), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "reading the entry blocked"
    return out[0]


def test_fifo_and_dev_zero_entries_are_passed_over_unread(tmp_path):
    config, img, verdict, key = _plus_one_case()
    publisher = Publisher(lambda: 0.0, tmp_path / "db", share=None)
    entry = publisher.store.folder / f"{key}.json"
    entry.parent.mkdir(parents=True)
    os.mkfifo(entry)
    writer = os.open(entry, os.O_RDWR)  # a writer that never closes: a plain read would wait forever
    try:
        assert _get_bounded(publisher.store, key) is None
    finally:
        os.close(writer)
    entry.unlink()
    entry.symlink_to("/dev/zero")
    assert _get_bounded(publisher.store, key) is None
    fields = publisher.diagnose(verdict, [img], config, CASE_KEY, None, finding_diagnosis)  # the run goes on
    assert fields["max_levels"] == 127.5


@pytest.mark.slow
def test_a_forged_diagnosis_is_measured_again(tmp_path):
    (tmp_path / "kernel.py").write_text(PLUS_HALF_RANGE)
    code, first, text = _fuzz(tmp_path, "one")
    assert code == 1, text
    truth = _pixel(first)
    assert truth["max_levels"] == 127.5  # +1.0 at std 0.5: half of 255 levels (a hand calculation)
    store = tmp_path / "db-diagnoses"
    entries = list(store.glob("*.json"))
    assert entries
    for path in entries:  # "explained by normalize-float/float16, 0.4 levels"
        data = json.loads(path.read_text())
        data["fields"].update(root_causes=["normalize-float"], max_levels=0.4, mean_levels=0.4, residual_max_levels=0.0,
                              residual_mean_levels=0.0,
                              attribution={"root_causes": ["normalize-float"], "explanation": "explained",
                                           "variants": ["normalize-float/float16"], "images": [0], "assumed": []})
        path.write_text(json.dumps(data))
    code, second, text = _fuzz(tmp_path, "two")
    assert code == 1, text
    # Every pixel finding keeps its measured levels; none carries the forgery.
    pixel = [f for f in second["findings"] if f["check"] == "pixel_mismatch"]
    assert pixel and all(f["max_levels"] == 127.5 for f in pixel)
    # ... and the root causes measured the first time (a +1.0 everywhere is a normalization's
    # mean: the family is the same as the forgery's, its variant and levels are not).
    measured = {f["key"]: (f["root_causes"], f.get("attribution")) for f in first["findings"]}
    assert all((f["root_causes"], f.get("attribution")) == measured[f["key"]] for f in pixel)
    assert "float16" not in json.dumps(second["findings"])


@pytest.mark.slow
def test_fifo_and_dev_zero_entries_are_passed_over(tmp_path):
    (tmp_path / "kernel.py").write_text(PLUS_HALF_RANGE)
    code, first, text = _fuzz(tmp_path, "one")
    assert code == 1, text
    entries = sorted((tmp_path / "db-diagnoses").glob("*.json"))
    for k, path in enumerate(entries):
        path.unlink()
        if k % 2:
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero")
    code, second, text = _fuzz(tmp_path, "two")
    assert code == 1 and "Traceback" not in text and "MemoryError" not in text, text
    assert _pixel(second)["max_levels"] == 127.5
