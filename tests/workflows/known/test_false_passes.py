"""No false pass from a file or a flag: `--known` accepts root causes of pixel differences only
(a crash, timeout, grid, feature-length, shape, invariance or accepts_invalid finding is never
known: `--write-known` leaves it out and a file naming it is refused, naming the entry), and
`--margin` / `--perf-threshold` are finite percentages from 0 to 1000 (nan%, inf%, 1e309% would
switch every `worse` check off)."""

from __future__ import annotations

import json
import math
import tomllib

import pytest

from breaking_candidates import __file__ as BREAKING
from cli_run import run_cli
from kimi_oracle.core.errors import InputError
from kimi_oracle.workflows.known import (KnownEntry, KnownFile, KnownFileError, Margin, aggregate, compare_rows,
                                         known_toml, read_known)

RAISES = f"{BREAKING}:raises"


def _crash_row() -> dict:
    return {"root_cause": "crash[RGB](ValueError)", "mode_class": "RGB", "check": "crash", "verdict": "new",
            "new": {"max_levels": None, "mean_levels": None, "share": None, "inputs": 3}, "message": "boom"}


@pytest.mark.parametrize("key", ["crash[RGB](ValueError)", "timeout[P](CallTimedOut)", "grid_mismatch",
                                 "feature_length", "shape_dtype", "invariance[permutation]", "accepts_invalid"])
def test_a_known_file_naming_a_non_pixel_finding_is_refused_naming_the_entry(tmp_path, key):
    path = tmp_path / "k.toml"
    path.write_text('schema_version = 1\n[[known]]\nroot_cause = "patch-order"\nmode_class = "RGB"\n'
                    f'[[known]]\nroot_cause = "{key}"\nmode_class = "*"\n')
    with pytest.raises(KnownFileError, match=r"known\[1\]\.root_cause: .*can be known"):
        read_known(path)


def test_write_known_never_writes_a_crash_row():
    pixel = {"root_cause": "patch-order", "mode_class": "RGB", "check": "pixel_mismatch", "verdict": "new",
             "new": {"max_levels": 255.0, "mean_levels": 40.0, "share": 0.9, "inputs": 2}, "message": "m"}
    data = tomllib.loads(known_toml([_crash_row(), pixel], "x"))
    assert [e["root_cause"] for e in data["known"]] == ["patch-order"]


def test_a_crash_row_is_never_known_even_when_an_entry_names_it():
    # (an entry made by hand, past the reader: compare_rows matches file entries to pixel rows only)
    new = aggregate([{"input": "i1", "check": "crash", "key": "crash[RGB](ValueError)", "message": "boom"}])
    known = KnownFile([KnownEntry("crash[RGB](ValueError)", "*")])
    rows = compare_rows(new, None, Margin(), known=known)
    assert [(r["verdict"], r["fails"]) for r in rows if r["check"] == "crash"] == [("new", True)]


def test_an_always_raising_candidate_fails_the_gate_with_the_known_file_it_wrote(tmp_path, capsys):
    known = tmp_path / "k.toml"
    common = ("--profile", "k3-small", "--fuzz-examples", "2", "--seed", "1", "--case-timeout", "20s")
    code, _, err = run_cli(capsys, "gate", "--candidate", RAISES, *common, "--write-known", known,
                           "--out", tmp_path / "g1")
    assert code == 1, err
    assert "crash" not in "".join(e["root_cause"] for e in tomllib.loads(known.read_text()).get("known", []))
    code, out, err = run_cli(capsys, "gate", "--candidate", RAISES, *common, "--known", known, "--out", tmp_path / "g2")
    assert code == 1, out + err
    assert json.loads((tmp_path / "g2" / "gate-report.json").read_text())["verdict"] == "fail"


@pytest.mark.parametrize("option", ["--margin", "--perf-threshold"])
@pytest.mark.parametrize("value", ["nan%", "inf%", "1e309%", "-1%", "1001%", "1e2%", "10 %%", ""])
def test_a_percentage_outside_its_range_is_a_usage_error(tmp_path, capsys, option, value):
    # (bounded, so that without the check the gate ends soon: then it passes, exit 0)
    code, _, err = run_cli(capsys, "gate", "--candidate", "reference", option, value, "--profile", "k3-small",
                           "--budget", "2s", "--fuzz-examples", "1", "--out", tmp_path / "g")
    assert code == 2, err
    assert option in err or "percentage" in err
    assert not (tmp_path / "g").exists()  # refused before anything ran


@pytest.mark.parametrize("share", [math.nan, math.inf, -0.1, 11.0])
def test_a_margin_object_refuses_non_finite_shares(share):
    with pytest.raises(InputError):
        Margin(share)
