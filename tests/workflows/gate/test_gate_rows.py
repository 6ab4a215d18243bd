"""The gate's verdict rules and the --known file, on hand-made observations (no candidate runs).

Every expected verdict follows from the rules in docs/gate.md applied by hand to the numbers
written here: margin 25 % plus a slack of 1 level (max), 0.25 level (mean), 1 % (share)."""

from __future__ import annotations

import pytest

from kimi_oracle.core.errors import InputError
from kimi_oracle.workflows.known import (KnownFileError, Margin, aggregate, compare_rows, known_toml, read_known,
                                         write_known)

M = Margin(0.25)


def obs(cause, mode="RGB", *, input="i1", max_levels=10.0, mean_levels=1.0, share=0.2, check="pixel_mismatch",
        key=None, stage="fuzz"):
    key = key or (f"{check}[{mode}]<levels>" if check == "pixel_mismatch" else f"{check}[{mode}](ValueError)")
    return {"input": input, "stage": stage, "check": check, "key": key, "root_causes": [cause] if cause else [],
            "attribution": None, "max_levels": max_levels, "mean_levels": mean_levels, "share": share,
            "message": "m"}


def verdicts(new_obs, old_obs, **kw):
    rows = compare_rows(aggregate(new_obs), aggregate(old_obs) if old_obs is not None else None, M, **kw)
    return {(r["root_cause"], r["mode_class"]): (r["verdict"], r["fails"]) for r in rows}, rows


def test_the_same_observations_are_known():
    o = [obs("resample-float"), obs("palette-bicubic", "P", input="i2", max_levels=180.0)]
    v, rows = verdicts(o, o)
    assert v == {("resample-float", "RGB"): ("known", False), ("palette-bicubic", "P"): ("known", False)}
    assert all(r["why"] == "the same as OLD" for r in rows)


def test_a_cause_only_new_has_is_new_and_fails():
    v, _ = verdicts([obs("resample-float"), obs("patch-order")], [obs("resample-float")])
    assert v[("patch-order", "RGB")] == ("new", True)
    assert v[("resample-float", "RGB")] == ("known", False)


def test_the_same_cause_in_another_mode_class_is_new():
    v, _ = verdicts([obs("resample-float", "RGBA+alpha")], [obs("resample-float", "RGB")])
    assert v[("resample-float", "RGBA+alpha")] == ("new", True)
    assert v[("resample-float", "RGB")] == ("improved", False)


@pytest.mark.parametrize("metric, old, new, verdict", [
    ("max_levels", 10.0, 13.4, "known"),     # limit 10 * 1.25 + 1 = 13.5
    ("max_levels", 10.0, 13.6, "worse"),
    ("mean_levels", 1.0, 1.5, "known"),      # limit 1 * 1.25 + 0.25 = 1.5 (not beyond)
    ("mean_levels", 1.0, 1.6, "worse"),
    ("share", 0.2, 0.26, "known"),           # limit 0.2 * 1.25 + 0.01 = 0.26
    ("share", 0.2, 0.27, "worse"),
    ("max_levels", 13.6, 10.0, "improved"),  # OLD's beyond NEW's margin: fell
    ("max_levels", 11.0, 10.0, "known"),
])
def test_margins(metric, old, new, verdict):
    v, _ = verdicts([obs("resample-float", **{metric: new})], [obs("resample-float", **{metric: old})])
    assert v[("resample-float", "RGB")][0] == verdict
    assert v[("resample-float", "RGB")][1] == (verdict == "worse")


def test_a_wider_margin_tolerates_more():
    rows = compare_rows(aggregate([obs("c", max_levels=19.0)]), aggregate([obs("c", max_levels=10.0)]), Margin(1.0))
    assert rows[0]["verdict"] == "known"  # 10 * 2 + 1 = 21


def test_a_new_cause_under_one_level_is_reported_but_fails_only_when_strict():
    new = [obs("resample-float"), obs("normalize-float", max_levels=0.4, mean_levels=0.01)]
    v, _ = verdicts(new, [obs("resample-float")])
    assert v[("normalize-float", "RGB")] == ("new", False)
    v, _ = verdicts(new, [obs("resample-float")], strict=True)
    assert v[("normalize-float", "RGB")] == ("new", True)


@pytest.mark.parametrize("check", ["crash", "grid_mismatch", "timeout", "shape_dtype", "feature_length"])
def test_a_non_pixel_finding_passes_only_when_old_has_it_on_the_same_input(check):
    new = [obs(None, check=check, input="golden:k3/RGB/opaque")]
    v, _ = verdicts(new, [obs(None, check=check, input="golden:k3/RGB/opaque")])
    assert list(v.values()) == [("known", False)]
    v, _ = verdicts(new, [obs(None, check=check, input="golden:k3/RGBA/checker")])
    assert list(v.values()) == [("new", True)]
    v, _ = verdicts(new, [])
    assert list(v.values()) == [("new", True)]
    # OLD fails that way on more inputs than NEW: improved
    v, _ = verdicts(new, [obs(None, check=check, input="golden:k3/RGB/opaque"),
                          obs(None, check=check, input="golden:k3/RGBA/checker")])
    assert list(v.values()) == [("improved", False)]


def test_accepts_invalid_is_reported_and_fails_only_when_strict():
    new = [obs(None, check="accepts_invalid", key="accepts_invalid", input="x")]
    v, rows = verdicts(new, [])
    assert list(v.values()) == [("new", False)] and rows[0]["check"] == "accepts_invalid"
    v, _ = verdicts(new, [], strict=True)
    assert list(v.values()) == [("new", True)]


def test_without_a_baseline_every_row_fails():
    v, _ = verdicts([obs("resample-float"), obs("normalize-float", max_levels=0.2)], None)
    assert set(v.values()) == {("new", True)}


def test_share_goes_to_the_only_cause_of_a_level_or_more():
    o = obs("patch-order", share=0.8)
    o["root_causes"] = ["normalize-float", "patch-order"]
    o["max_levels_seen"] = None
    o["attribution"] = {"max_levels": 200.0, "mean_levels": 50.0, "explained": [
        {"root_cause": "patch-order", "image": 0, "residual_max_levels": 0.5, "residual_mean_levels": 0.01},
        {"root_cause": "normalize-float", "image": 0, "residual_max_levels": 0.0, "residual_mean_levels": 0.0}]}
    rows = aggregate([o])
    assert rows[("patch-order", "RGB")].share == 0.8 and rows[("patch-order", "RGB")].max_levels == 199.5
    assert rows[("normalize-float", "RGB")].share is None and rows[("normalize-float", "RGB")].max_levels == 0.5
    # two causes of a level or more: the image's share is neither's
    o["attribution"]["explained"][0]["residual_max_levels"] = 150.0
    o["attribution"]["explained"][1]["residual_max_levels"] = 0.0
    rows = aggregate([o])
    assert rows[("patch-order", "RGB")].max_levels == 50.0 and rows[("normalize-float", "RGB")].max_levels == 150.0
    assert rows[("patch-order", "RGB")].share is None and rows[("normalize-float", "RGB")].share is None


# ---------------------------------------------------------------------------------------------
# the --known file


def test_known_round_trip_accepts_what_it_was_written_from(tmp_path):
    new = aggregate([obs("resample-float", max_levels=12.0), obs("palette-bicubic", "P", input="i2", max_levels=183.0,
                                                                  mean_levels=87.27561, share=0.153061)])
    rows = compare_rows(new, None, M)
    path = write_known(tmp_path / "known.toml", rows, "eager", note="seed 1")
    known = read_known(path)
    assert known.candidate == "eager" and len(known.entries) == 2
    entry = known.match("palette-bicubic", "P")
    assert entry.max_levels == 183.0 and entry.mean_levels >= 87.27561 and entry.share >= 0.153061
    again = compare_rows(new, None, M, known=known)
    assert {r["verdict"] for r in again} == {"known"} and not any(r["fails"] for r in again)
    # a cause the file does not list fails; one grown beyond its limits is worse
    more = aggregate([obs("resample-float", max_levels=40.0), obs("patch-order")])
    v = {(r["root_cause"], r["mode_class"]): r["verdict"] for r in compare_rows(more, None, M, known=known)}
    assert v == {("resample-float", "RGB"): "worse", ("patch-order", "RGB"): "new",
                 ("palette-bicubic", "P"): "improved"}


def test_a_wildcard_mode_class_and_missing_limits(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('schema_version = 1\n[[known]]\nroot_cause = "resample-float"\nmode_class = "*"\n'
                    'max_levels = 20\n')
    known = read_known(path)
    rows = compare_rows(aggregate([obs("resample-float", "L", mean_levels=9.0), obs("resample-float", "RGBA")]),
                        None, M, known=known)
    assert {r["verdict"] for r in rows} == {"known"}  # no mean limit given: not checked


def test_a_baseline_failure_the_known_file_accepts_is_known(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('schema_version = 1\n[[known]]\nroot_cause = "patch-order"\nmode_class = "RGB"\n'
                    'max_levels = 20\nmean_levels = 2\n')
    v, _ = verdicts([obs("patch-order")], [], known=read_known(path))
    assert v[("patch-order", "RGB")] == ("known", False)


@pytest.mark.parametrize("text, key", [
    ('schema_version = 2\n', "schema_version"),
    ('schema_version = 1\ncolour = "red"\n', "colour"),
    ('schema_version = 1\n[[known]]\nmode_class = "RGB"\n', "known[0].root_cause"),
    ('schema_version = 1\n[[known]]\nroot_cause = "x"\n', "known[0].mode_class"),
    ('schema_version = 1\n[[known]]\nroot_cause = "x"\nmode_class = "RGB"\nmax_levels = -1\n', "known[0].max_levels"),
    ('schema_version = 1\n[[known]]\nroot_cause = "x"\nmode_class = "RGB"\nmean_levels = "a lot"\n',
     "known[0].mean_levels"),
    ('schema_version = 1\n[[known]]\nroot_cause = "x"\nmode_class = "RGB"\nshare = 1.5\n', "known[0].share"),
    ('schema_version = 1\n[[known]]\nroot_cause = "x"\nmode_class = "RGB"\nmax_level = 3\n', "known[0].max_level"),
    ('schema_version = 1\n[[known]]\nroot_cause = "x"\nmode_class = "RGB"\n'
     '[[known]]\nroot_cause = "x"\nmode_class = "RGB"\n', "known[1]"),
    ('schema_version = 1\nknown = 3\n', "known"),
    ('schema_version = [1\n', "not valid TOML"),
])
def test_a_bad_known_file_is_a_typed_error_naming_the_key(tmp_path, text, key):
    path = tmp_path / "k.toml"
    path.write_text(text)
    with pytest.raises(KnownFileError) as exc:
        read_known(path)
    assert isinstance(exc.value, InputError) and exc.value.exit_code == 2
    assert key in str(exc.value) and str(path) in str(exc.value)


def test_the_cli_refuses_a_bad_known_file_before_running_anything(tmp_path, capsys):
    from kimi_oracle.cli import main

    bad = tmp_path / "k.toml"
    bad.write_text('schema_version = 1\n[[known]]\nroot_cause = "x"\nmode_class = "RGB"\nmax_levels = -2\n')
    with pytest.raises(SystemExit) as exc:
        main(["gate", "--candidate", "reference", "--known", str(bad), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "known[0].max_levels" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "gate-report.json").exists()


def test_known_toml_is_valid_toml_with_odd_messages():
    import tomllib

    rows = compare_rows(aggregate([{**obs("c"), "message": 'quote " backslash \\ newline\n é'}]), None, M)
    data = tomllib.loads(known_toml(rows, 'cand"idate'))
    assert data["known"][0]["note"].startswith('quote " backslash')
    assert data["candidate"] == 'cand"idate'


def test_causes_seen_only_where_a_systematic_new_cause_acts_are_not_judged():
    # NEW = OLD + a planted patch-order bug, new in two mode classes (RGB on i1, P on i2). On i1
    # the attribution also gives "background" 69 levels that OLD never shows: its only input is one
    # where patch-order acts, so it is not comparable and not judged (known, not failing). The
    # same cause on an input where no new cause acts (i3) stays `new`.
    new_obs = [obs("patch-order", "RGB", input="i1", max_levels=200.0), obs("background", "RGB", input="i1", max_levels=69.0),
               obs("patch-order", "P", input="i2", max_levels=150.0)]
    v, rows = verdicts(new_obs, [])
    assert v[("patch-order", "RGB")] == ("new", True) and v[("patch-order", "P")] == ("new", True)
    assert v[("background", "RGB")] == ("known", False)
    assert "patch-order" in next(r["why"] for r in rows if r["root_cause"] == "background")
    v2, _ = verdicts(new_obs + [obs("background", "RGB", input="i3", max_levels=69.0)], [])
    assert v2[("background", "RGB")] == ("new", True)
    # one mode class only: not systematic, nothing is excused
    v3, _ = verdicts(new_obs[:2], [])
    assert v3[("background", "RGB")] == ("new", True)


def test_a_known_file_that_accepts_the_systematic_cause_excuses_nothing_else():
    # (found by review) with a baseline and a known file accepting patch-order everywhere, the
    # background row seen only where patch-order acts must still fail: nothing else would.
    from kimi_oracle.workflows.known import KnownEntry, KnownFile

    new_obs = [obs("patch-order", "RGB", input="i1", max_levels=200.0), obs("background", "RGB", input="i1", max_levels=69.0),
               obs("patch-order", "P", input="i2", max_levels=150.0)]
    known = KnownFile([KnownEntry("patch-order", "*", max_levels=255.0)])
    v, _ = verdicts(new_obs, [], known=known)
    assert v[("patch-order", "RGB")][1] is False and v[("patch-order", "P")][1] is False
    assert v[("background", "RGB")] == ("new", True)


def test_write_known_escapes_what_toml_forbids(tmp_path):
    # DEL, control characters, characters beyond the BMP and quotes in a note (a candidate's own
    # exception text) must come back from TOML unchanged (tomllib is the independent reader).
    import tomllib

    text = 'bad \x7f \x01 tab\t "q" \\ 😀 é'
    rows = [{"root_cause": "patch-order", "mode_class": "RGB", "check": "pixel_mismatch", "verdict": "new",
             "new": {"max_levels": 3.0, "mean_levels": None, "share": None, "inputs": 1}, "message": text}]
    path = write_known(tmp_path / "k.toml", rows, "x", note=text)
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    assert data["comment"] == text and data["known"][0]["note"] == text
    assert read_known(path).entries[0].note == text  # and our own reader accepts it


def _differing_setup(tmp_path, new_outcomes, old_outcomes):
    """A gate whose NEW and OLD are the reference, counting their calls, and two runs with the
    outcomes given (generated example index -> digest)."""
    from kimi_oracle.fuzzers.fuzzing import FuzzOptions, FuzzRun
    from kimi_oracle.oracle.candidates import Candidate
    from kimi_oracle.pipelines import reference
    from kimi_oracle.workflows.gate import Gate, GateOptions

    gate = Gate("reference", "reference", GateOptions(budget_s=10, seed=3), tmp_path)
    calls = []

    def counted(images, config):
        calls.append(1)
        return reference.preprocess(images, config)

    gate.new, gate.old = Candidate("new", counted), Candidate("old", counted)
    run_new = FuzzRun("new", gate.config, FuzzOptions(seed=3), 3)
    run_old = FuzzRun("old", gate.config, FuzzOptions(seed=3), 3)
    run_new.outcomes, run_old.outcomes = new_outcomes, old_outcomes
    return gate, run_new, run_old, calls


def test_differing_examples_skip_those_a_side_did_not_judge_or_timed_out_on(tmp_path):
    # An example NEW skipped (a mode class it hung on) or timed out on differs from OLD's outcome,
    # but re-running it would cost a whole case timeout each, unbudgeted (found by review): only
    # the other differing examples are judged on both sides.
    gate, run_new, run_old, calls = _differing_setup(
        tmp_path, {0: "not-judged", 1: "timeout:CallTimedOut", 2: "aaa", 3: "same"},
        {0: "bbb", 1: "ccc", 2: "ddd", 3: "same"})
    inputs: dict = {}
    from kimi_oracle.workflows.gate.fuzz import _differing_examples

    assert _differing_examples(gate.ctx, run_new, run_old, inputs) == 3  # all three counted
    assert len(calls) == 2  # only example 2 re-run, once per side


def test_differing_examples_stop_once_the_fuzz_stages_allowance_is_spent(tmp_path):
    # Under the gate's overhead allowance the differing examples are judged only while it lasts:
    # `allowance_spent` is asked before each one (here: spent after the first).
    gate, run_new, run_old, calls = _differing_setup(tmp_path, {0: "a0", 1: "a1", 2: "a2"},
                                                     {0: "b0", 1: "b1", 2: "b2"})
    asked = []
    spent = lambda: asked.append(1) or len(asked) > 1  # noqa: E731
    from kimi_oracle.workflows.gate.fuzz import _differing_examples

    assert _differing_examples(gate.ctx, run_new, run_old, {}, spent) == 3  # all counted as differing
    assert len(calls) == 2 and len(asked) == 2  # one example re-run (once per side), then it stopped


def test_a_mean_that_grew_only_by_losing_inputs_is_not_worse():
    # OLD shows a cause on three inputs (means 5, 5, 0.3: 3.43 on average), NEW on two of them with
    # the same means (5, 5): NEW lost the cause on the third input, so its average over inputs rose
    # to 5 without growing anywhere (met on the README gate, seed 7777). The same means on the
    # same inputs: known. A mean that did grow on a shared input still fails.
    old = [obs("fill-stage", "RGBA+alpha", input=i, max_levels=31.0, mean_levels=m)
           for i, m in (("i1", 5.0), ("i2", 5.0), ("i3", 0.3))]
    new = [obs("fill-stage", "RGBA+alpha", input=i, max_levels=31.0, mean_levels=m) for i, m in (("i1", 5.0), ("i2", 5.0))]
    v, rows = verdicts(new, old)
    assert v[("fill-stage", "RGBA+alpha")] == ("known", False)
    assert rows[0]["old"]["mean_levels"] == round((5.0 + 5.0 + 0.3) / 3, 4)  # the row still shows OLD's own
    grown = [obs("fill-stage", "RGBA+alpha", input=i, max_levels=31.0, mean_levels=m) for i, m in (("i1", 9.0), ("i2", 5.0))]
    v, _ = verdicts(grown, old)
    assert v[("fill-stage", "RGBA+alpha")] == ("worse", True)  # (9 + 5) / 2 = 7 > 5 * 1.25 + 0.25
