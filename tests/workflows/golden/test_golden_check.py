"""`golden check`: any edited entry fails and is named; candidates; the report; the CLI."""

from __future__ import annotations

import json
import random
import textwrap

import pytest
import torch
from golden_testlib import (  # noqa: F401  (fixture)
    FILES,
    accept_edits,
    edit_entry,
    edit_meta,
    entries,
    golden_copy,
    key_of,
    mutate,
    obtained_of,
    read_lines,
    snapshot,
    write_lines,
)

from kimi_oracle import cli
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.pipelines import reference
from kimi_oracle.workflows import golden


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize("kind,profile", FILES)
def test_editing_any_one_entry_fails_naming_it(golden_copy, kind, profile):
    path = golden_copy / kind / f"{profile}.jsonl"
    original = entries(path)
    rng = random.Random(f"{kind}/{profile}")
    # Three entries per file, a random field of each: every edit alone must fail the check.
    for entry in rng.sample(original, 3):
        key = key_of(kind, entry)
        pristine = path.read_bytes()
        field_path = None

        def change(e):
            nonlocal field_path
            field_path = mutate(e, rng)

        edit_entry(path, kind, key, change)
        report = golden.check(golden_copy, kinds=[kind], profiles=[profile])
        assert not report.ok, f"edit of {key}.{field_path} went unnoticed"
        text = report.render(max_lines=10)
        assert key in text, f"{key}.{field_path}: report does not name the entry:\n{text}"
        obtained = obtained_of(path)
        assert obtained.is_file()
        # The .obtained file holds what is computed now: the committed entries.
        assert entries(obtained) == original
        path.write_bytes(pristine)
    assert golden.check(golden_copy, kinds=[kind], profiles=[profile]).ok
    assert not obtained_of(path).exists(), "a stale .obtained file is removed once the file matches"


def test_grid_diff_is_readable(golden_copy):
    path = golden_copy / "grids" / "k25.jsonl"

    def change(e):
        e.update(new_w=672, pad_w=0, grid_thw=[1, 36, 48], num_tokens=432)

    edit_entry(path, "grids", "640x480", change)
    report = golden.check(golden_copy, kinds=["grids"], profiles=["k25"])
    text = report.render()
    assert "~ 640x480 [real_world]: grid 1x36x48, 432 tokens -> grid 1x36x46, 414 tokens" in text
    assert "resize+pad 672x480 +0+24 -> 640x480 +4+24" in text
    assert f"obtained: {golden_copy / 'grids' / 'k25.jsonl.obtained'}" in text or "k25.jsonl.obtained" in text
    assert text.splitlines()[-1].startswith("golden reference: 1 of 1 files differ, 1 entries")


def test_pixel_diff_is_readable(golden_copy):
    path = golden_copy / "pixels" / "k3-small.jsonl"
    case = "RGBA/checker/after_resize/chessboard"
    old = {e["id"]: e for e in entries(path)}[case]

    def change(e):
        e["sha256"] = "f" * 64
        e["stats"]["mean"] = 0.25

    edit_entry(path, "pixels", case, change)
    text = golden.check(golden_copy, kinds=["pixels"], profiles=["k3-small"]).render()
    line = next(ln for ln in text.splitlines() if case in ln)
    assert f"digest changed ffffffffffff -> {old['sha256'][:12]}" in line
    assert "(unchanged)" in line and "mean 0.25 -> " in line
    assert f"{old['params']['width']}x{old['params']['height']} RGBA checker" in line


def test_removed_and_added_entries_are_named(golden_copy):
    path = golden_copy / "grids" / "k3.jsonl"
    lines = read_lines(path)
    dropped = json.loads(lines[5])
    extra = dict(json.loads(lines[6]), width=123457)
    head = json.loads(lines[0])
    head["_meta"]["count"] = len(lines) - 1
    lines = [json.dumps(head)] + lines[1:5] + lines[6:] + [json.dumps(extra)]
    write_lines(path, lines)
    report = golden.check(golden_copy, kinds=["grids"], profiles=["k3"])
    text = report.render()
    assert f"+ {dropped['width']}x{dropped['height']} [" in text
    assert f"- 123457x{extra['height']} [" in text and "not in the catalogue" in text
    assert report.files[0].counts() == {"changed": 0, "added": 1, "removed": 1}


@pytest.mark.parametrize("damage", ["truncate", "count", "schema", "bad_json", "duplicate"])
def test_damaged_files_fail_with_the_line(golden_copy, damage):
    path = golden_copy / "pixels" / "k3.jsonl"
    data = path.read_bytes()
    lines = read_lines(path)
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "count":
        edit_meta(path, lambda m: m.update(count=m["count"] + 1))
    elif damage == "schema":
        edit_meta(path, lambda m: m.update(schema_version=99))
    elif damage == "bad_json":
        lines[7] = lines[7][:-3]
        write_lines(path, lines)
    else:
        lines[9] = lines[8]
        write_lines(path, lines)
    report = golden.check(golden_copy, kinds=["pixels"], profiles=["k3"])
    assert not report.ok
    problem = report.files[0].problems[0]
    expected = {"truncate": "truncated", "count": "count", "schema": "schema_version 99",
                "bad_json": "line 8: not JSON", "duplicate": "line 10: duplicate entry"}[damage]
    assert expected in problem, problem
    assert obtained_of(path).is_file()


def test_config_change_fails_and_other_versions_are_notes(golden_copy):
    path = golden_copy / "grids" / "k3-small.jsonl"
    edit_meta(path, lambda m: m.update(config_sha256="0" * 64))
    report = golden.check(golden_copy, kinds=["grids"], profiles=["k3-small"])
    assert not report.ok and "config changed since recording" in report.files[0].problems[0]
    edit_meta(path, lambda m: m.update(config_sha256=golden.config_hash(golden.PreprocessConfig.profile("k3-small"))))
    edit_meta(path, lambda m: m["versions"].update(numpy="0.0.1"))
    accept_edits(golden_copy)  # (recorded so elsewhere and accepted: the manifest matches)
    report = golden.check(golden_copy, kinds=["grids"], profiles=["k3-small"])
    assert report.ok
    assert "note: " in report.render() and "numpy 0.0.1" in report.render()


def test_pillow_mismatch_is_reported_first(golden_copy, capsys):
    path = golden_copy / "pixels" / "k25.jsonl"
    edit_meta(path, lambda m: m["versions"].update(pillow="12.2.0"))
    accept_edits(golden_copy)
    code, out, _ = run_cli(["golden", "check", "--golden-dir", str(golden_copy), "--kind", "pixels",
                            "--profile", "k25"], capsys)
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("WARNING:") and "Pillow 12.2.0" in first and "installed Pillow" in first


def _nudged(mode: str):
    """The reference, with a one-ulp error in the first value of every image of `mode`."""
    def candidate(images, config):
        out = reference.preprocess(images, config)
        pv = out.pixel_values.clone()
        for img, start in zip(images, out.patch_offsets()):
            if img.mode == mode:
                pv[start].view(-1)[0] = torch.nextafter(pv[start].view(-1)[0], torch.tensor(9.0))
        return PreprocessResult(pv, out.grid_thws)

    return candidate


def test_wrong_candidate_fails_on_exactly_its_wrong_cases(golden_copy):
    def one_at_a_time(images, config):
        # A one-ulp error on the first value of every LA image (batched calls fail on purpose,
        # so the runner has to fall back to one image a call).
        if len(images) > 1:
            raise RuntimeError("one image at a time")
        return _nudged("LA")(images, config)

    # (which cases change is the point here: their diagnosis, about 0.4 s each for these 56, is
    # test_differing_pixel_cases_name_their_root_causes)
    report = golden.check(golden_copy, one_at_a_time, kinds=["pixels"], profiles=["k3-small"],
                          write_obtained=False, diagnose=False)
    changed = {c.key for c in report.files[0].changes}
    want = {e["id"] for e in entries(golden_copy / "pixels" / "k3-small.jsonl") if e["params"]["mode"] == "LA"}
    assert changed == want
    assert all(c.change == "changed" and "digest changed" in c.describe() for c in report.files[0].changes)
    assert not obtained_of(golden_copy / "pixels" / "k3-small.jsonl").exists()


def test_candidate_with_swapped_grids_and_crashes(golden_copy):
    def candidate(images, config):
        if any(img.mode == "CMYK" for img in images):
            raise ValueError("no CMYK here")
        out = reference.preprocess(images, config)
        return PreprocessResult(out.pixel_values, out.grid_thws[:, [0, 2, 1]])

    report = golden.check_pixels(candidate, golden_copy, profiles=["k3-small"])
    by_key = {c.key: c for c in report.files[0].changes}
    square = [e for e in entries(golden_copy / "pixels" / "k3-small.jsonl")
              if e["grid_thw"][1] == e["grid_thw"][2] and e["params"]["mode"] != "CMYK"]
    assert all(e["id"] not in by_key for e in square), "a square grid swapped is the same grid"
    cmyk = by_key["CMYK/opaque/after_resize/gray"].describe()
    assert "ValueError: no CMYK here" in cmyk
    oblong = [e for e in entries(golden_copy / "pixels" / "k3-small.jsonl")
              if e["grid_thw"][1] != e["grid_thw"][2] and e["params"]["mode"] != "CMYK"]
    assert oblong and all(e["id"] in by_key for e in oblong)
    e = oblong[0]
    t, h, w = e["grid_thw"]
    assert f"grid {t}x{h}x{w}, {t * h * w} patches -> grid {t}x{w}x{h}" in by_key[e["id"]].describe()


def test_candidate_returning_garbage_is_a_harness_error(golden_copy, capsys, tmp_path):
    cand = tmp_path / "cand.py"
    cand.write_text(textwrap.dedent("""
        from kimi_oracle.pipelines import reference
        def good(images, config):
            return reference.preprocess(images, config)
        def garbage(images, config):
            return "not a result"
    """))
    code, out, err = run_cli(["golden", "check", "--golden-dir", str(golden_copy), "--kind", "pixels",
                              "--profile", "k3", "--candidate", f"{cand}:good"], capsys)
    assert code == 0, out + err
    code, out, err = run_cli(["golden", "check", "--golden-dir", str(golden_copy), "--kind", "pixels",
                              "--profile", "k3", "--candidate", f"{cand}:garbage"], capsys)
    assert code == 2 and err.startswith("error: ") and "garbage" in err
    with pytest.raises(CandidateError):
        golden.check(golden_copy, f"{cand}:garbage", kinds=["pixels"], profiles=["k3"])
    code, _, err = run_cli(["golden", "check", "--golden-dir", str(golden_copy), "--candidate", "no_such_mod:fn"], capsys)
    assert code == 2 and "no_such_mod" in err and len(err.strip().splitlines()) == 1


def test_cli_check_exit_codes_and_obtained(golden_copy, capsys):
    before = snapshot(golden_copy)
    code, out, _ = run_cli(["golden", "check", "--golden-dir", str(golden_copy)], capsys)
    assert code == 0 and "all 8 files match" in out
    assert snapshot(golden_copy) == before
    edit_entry(golden_copy / "grids" / "k3.jsonl", "grids", "1920x1080", lambda e: e.update(num_tokens=1))
    edited = snapshot(golden_copy)
    code, out, _ = run_cli(["golden", "check", "--golden-dir", str(golden_copy), "--kind", "grids"], capsys)
    assert code == 1 and "~ 1920x1080 [real_world]" in out
    assert snapshot(golden_copy) == edited, "check wrote into the golden directory"
    out_dir = golden.default_out_dir()
    assert sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file()) == [
        "golden-report.json", "golden-report.md", "grids/k3.jsonl.obtained"]
    recorded = json.loads((out_dir / "golden-report.json").read_text())
    assert recorded["candidate"] == "reference" and recorded["command"] == "check"
    assert recorded["versions"]["Pillow"] and recorded["num_changes"] == 1
    code, out, _ = run_cli(["golden", "check", "--golden-dir", str(golden_copy), "--kind", "grids", "--json"], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["num_changes"] == 1
    assert doc["files"][0]["changes"][0]["key"] == "1920x1080"


def test_cli_missing_golden_dir_is_an_error(tmp_path, capsys):
    code, _, err = run_cli(["golden", "check", "--golden-dir", str(tmp_path / "nope")], capsys)
    assert code == 2 and "does not exist" in err


def test_missing_file_fails(golden_copy):
    (golden_copy / "grids" / "k25.jsonl").unlink()
    report = golden.check(golden_copy, kinds=["grids"], profiles=["k25"])
    assert not report.ok and report.files[0].problems == ["missing golden file"]
    assert "4061 added" in report.render()
    assert obtained_of(golden_copy / "grids" / "k25.jsonl").is_file()


def test_partial_check_compares_only_the_selected_cases(golden_copy):
    path = golden_copy / "pixels" / "k3-small.jsonl"
    la = {e["id"] for e in entries(path) if e["params"]["mode"] == "LA"}
    report = golden.check_pixels(_nudged("LA"), golden_copy, profiles=["k3-small"],  # (diagnose: as above)
                                 select=lambda c: c.params.mode in ("LA", "L"), write_obtained=True, diagnose=False)
    assert {c.key for c in report.files[0].changes} == la
    assert not obtained_of(path).exists(), "a partial check never writes .obtained files"
    report = golden.check_pixels(_nudged("LA"), golden_copy, profiles=["k3-small"],
                                 select=lambda c: c.params.mode == "L")
    assert report.ok


def test_int32_grids_fail_like_the_oracles_shape_dtype_check(golden_copy):
    # The oracle's shape_dtype check rejects int32 grids; the goldens used to cast them to int64.
    def int32_grids(images, config):
        out = reference.preprocess(images, config)
        return PreprocessResult(out.pixel_values, out.grid_thws.to(torch.int32))

    report = golden.check_pixels(int32_grids, golden_copy, profiles=["k3-small"],
                                 select=lambda c: c.params.mode in ("L", "RGB"))
    changes = report.files[0].changes
    assert changes and not report.ok
    assert all("grid_thws dtype int32 != int64" in c.describe() for c in changes)


def test_differing_pixel_cases_name_their_root_causes(golden_copy):
    # A planted straight-alpha resize: every RGBA case it changes says why (oracle.diagnosis).
    from mutants.planted import BY_NAME

    report = golden.check_pixels(BY_NAME["straight_alpha"], golden_copy, profiles=["k3-small"],
                                 select=lambda c: c.params.mode == "RGBA")
    changed = [c for c in report.files[0].changes if c.change == "changed"]
    assert changed and all(c.diagnosis is not None for c in changed)
    assert any("alpha-straight" in c.diagnosis["root_causes"] for c in changed)
    line = next(c.describe() for c in changed if "alpha-straight" in c.diagnosis["root_causes"])
    assert "root causes: " in line and "alpha-straight" in line
    assert "diagnosis" in changed[0].to_dict()
