"""`kimi-oracle merge`: two real nightly shard outputs (`--shard 1/2`, `--shard 2/2`, a planted
bug, a few examples each) merged into one report, and every kind of bad input refused with exit 2
naming the file, nothing written. Expected values come from the shard folders' own files (the
case.json keys, the input files' sizes, the database file names), never from the merge code."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cli_run import run_cli
from nightly_helpers import planted, run_nightly

CANDIDATE = planted("drops_last_row")


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> list[Path]:
    """Two shards of one campaign, each finding the planted bug (about 8 s of CPU each)."""
    root = tmp_path_factory.mktemp("shards")
    dirs = []
    for index in (1, 2):
        out = root / f"s{index}"
        proc = run_nightly("--budget", "300", "--max-examples", "8", "--engines", "hypothesis", "--profile",
                           "k3-small", "--candidate", CANDIDATE, "--shard", f"{index}/2", "--seed", "5",
                           "--out", str(out), timeout=300)
        assert proc.returncode == 1, proc.stderr[-2000:]
        dirs.append(out)
    return dirs


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


def _edit_summary(shard: Path, **changes) -> None:
    s = _summary(shard)
    s.update(changes)
    (shard / "summary.json").write_text(json.dumps(s))


def _keys(shard: Path) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for case in sorted((shard / "findings").glob("*/case.json")):
        out.setdefault(json.loads(case.read_text())["key"], []).append(case.parent)
    return out


def _input_size(folder: Path) -> int:
    case = json.loads((folder / "case.json").read_text())
    return sum((folder / e["file"]).stat().st_size for e in case["images"] if e.get("file"))


def _db_files(db: Path) -> set[str]:
    return {str(p.relative_to(db)) for p in db.rglob("*") if p.is_file()}


def test_two_shards_merge_into_one_report_deduplicated_by_key(shards, tmp_path, capsys):
    s1, s2 = shards
    # Shard 2 also holds a finding of another key (its case.json key rewritten): the union has both.
    s2 = _copy(s2, tmp_path / "s2")
    extra = next((s2 / "findings").iterdir())
    other = _copy(extra, s2 / "findings" / "other-key-1")
    case = json.loads((other / "case.json").read_text())
    (other / "case.json").write_text(json.dumps({**case, "id": "other-key-1", "key": "feature_length[other]"}))
    summary = _summary(s2)
    _edit_summary(s2, findings=summary["findings"] + [{**summary["findings"][0], "id": "other-key-1"}])
    expected = _keys(s1)
    for key, folders in _keys(s2).items():
        expected.setdefault(key, []).extend(folders)

    code, out, err = run_cli(capsys, "merge", s1, s2, "--out", tmp_path / "merged")
    assert code == 1, err
    merged = tmp_path / "merged"
    s = _summary(merged)
    assert s["schema_version"] == 2 and s["command"] == "merge"
    assert sorted(f["key"] for f in s["findings"]) == sorted(expected)
    assert len(s["findings"]) == len(expected) < sum(len(v) for v in expected.values())
    for f in s["findings"]:
        smallest = min(_input_size(p) for p in expected[f["key"]])
        assert _input_size(merged / "findings" / f["id"]) == smallest
        assert len(f["found_in"]) == len(expected[f["key"]])
    assert sorted(p.name for p in (merged / "findings").iterdir()) == sorted(f["id"] for f in s["findings"])
    # Per-shard provenance: each shard's folder and its summary's SHA-256.
    assert [(p["dir"], p["summary_sha256"]) for p in s["shards"]] == [
        (str(d), hashlib.sha256((d / "summary.json").read_bytes()).hexdigest()) for d in (s1, s2)]
    assert [p["shard"]["index"] for p in s["shards"]] == [1, 2]
    # The example databases unioned: every entry of either shard is there.
    assert _db_files(merged / "hypothesis-db") >= _db_files(s1 / "hypothesis-db") | _db_files(s2 / "hypothesis-db")
    assert s["engines"]["hypothesis"]["examples"] == sum(_summary(d)["engines"]["hypothesis"]["examples"]
                                                         for d in (s1, s2))
    # Each worker's CPU split kept, with the shard it ran in (the shards' own rows).
    assert s["engines"]["hypothesis"]["cpu"] == [{"shard": str(d), **row} for d in (s1, s2)
                                                 for row in _summary(d)["engines"]["hypothesis"]["cpu"]]
    assert len(s["engines"]["hypothesis"]["cpu"]) == 2
    junit = ET.parse(merged / "junit.xml").getroot()
    assert int(junit.get("failures")) >= 1
    assert "## Shards" in (merged / "summary.md").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left
    # A merged report merges again (schema 2 is read), with a shard: nothing new.
    code, _, err = run_cli(capsys, "merge", merged, shards[0], "--out", tmp_path / "again")
    assert code == 1, err
    assert len(_summary(tmp_path / "again")["findings"]) == len(expected)


def test_a_shard_of_another_candidate_is_exit_2_naming_it(shards, tmp_path, capsys):
    other = _copy(shards[1], tmp_path / "other")
    _edit_summary(other, candidate="eager")
    code, _, err = run_cli(capsys, "merge", shards[0], other, "--out", tmp_path / "merged")
    assert code == 2
    assert str(other / "summary.json") in err and "candidate" in err and "--allow-mixed" in err
    assert not (tmp_path / "merged").exists()
    code, _, err = run_cli(capsys, "merge", shards[0], other, "--out", tmp_path / "merged", "--allow-mixed")
    assert code == 1, err
    assert any("mixed" in n for n in _summary(tmp_path / "merged")["notes"])


@pytest.mark.parametrize("damage", ["profile", "config", "schema", "truncated", "tampered", "missing_folder"])
def test_bad_inputs_are_exit_2_naming_the_file(shards, tmp_path, capsys, damage):
    bad = _copy(shards[1], tmp_path / "bad")
    folder = next((bad / "findings").iterdir())
    named = bad / "summary.json"
    if damage == "profile":
        _edit_summary(bad, profile="k3")
    elif damage == "config":
        _edit_summary(bad, config={**_summary(bad)["config"], "patch_size": 16})
    elif damage == "schema":
        _edit_summary(bad, schema_version=99)
    elif damage == "truncated":
        named.write_bytes(named.read_bytes()[: named.stat().st_size // 2])
    elif damage == "tampered":  # a stored input changed after the finding was written
        entry = json.loads((folder / "case.json").read_text())["images"][0]
        path = folder / entry["file"]
        path.write_bytes(path.read_bytes() + b"\0")
        named = folder / "case.json"
    else:
        shutil.rmtree(folder)
    code, _, err = run_cli(capsys, "merge", shards[0], bad, "--out", tmp_path / "merged")
    assert code == 2
    assert str(named) in err, err
    assert not (tmp_path / "merged").exists()


def test_nothing_found_is_exit_0_and_a_full_out_is_replaced_only_when_asked(shards, tmp_path, capsys):
    clean = _copy(shards[0], tmp_path / "clean")
    shutil.rmtree(clean / "findings")
    (clean / "findings").mkdir()
    _edit_summary(clean, findings=[], root_causes=[])
    out = tmp_path / "merged"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = run_cli(capsys, "merge", clean, "--out", out)
    assert code == 2 and "--replace" in err
    assert (out / "keep.txt").read_text() == "mine"
    code, _, err = run_cli(capsys, "merge", clean, "--out", out, "--replace")
    assert code == 0, err
    assert not (out / "keep.txt").exists()
    s = _summary(out)
    assert s["findings"] == [] and any("replaced" in n for n in s["notes"])


def _corpus_entry(folder: Path, data: bytes) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()  # libFuzzer's own naming
    (folder / name).write_bytes(data)
    return name


def test_the_merged_corpus_is_minimized_by_libfuzzer(shards, tmp_path, capsys):
    # Each shard's decoder corpus: 12 byte strings no decoder accepts (the same coverage of
    # Pillow's code, one of them is enough) and a real PNG each (other code). libFuzzer's
    # -merge=1 keeps fewer than the union, only entries of the union, the PNGs' coverage among them.
    pytest.importorskip("atheris")
    import random

    from PIL import Image

    rng = random.Random(7)
    union: set[str] = set()
    copies = []
    for k, shard in enumerate(shards):
        copy = _copy(shard, tmp_path / f"c{k}")
        folder = copy / "corpus" / "decoder"
        for _ in range(12):
            union.add(_corpus_entry(folder, b"\xee" + bytes(rng.randrange(256) for _ in range(7))))
        buf = io.BytesIO()
        (Image.new("RGB", (3, 2), (1, 2, 3)) if k == 0 else Image.new("L", (4, 2), 9)).save(buf, "PNG")
        union.add(_corpus_entry(folder, buf.getvalue()))
        copies.append(copy)
    code, _, err = run_cli(capsys, "merge", *copies, "--out", tmp_path / "merged")
    assert code == 1, err
    kept = {p.name for p in (tmp_path / "merged" / "corpus" / "decoder").iterdir()}
    assert kept and kept < union and len(kept) <= len(union) - 10, (len(kept), len(union))
    notes = _summary(tmp_path / "merged")["notes"]
    assert any(f"{len(union)} inputs in the shards' union, {len(kept)} kept" in n for n in notes), notes
    # --no-minimize keeps the union as it is
    code, _, err = run_cli(capsys, "merge", *copies, "--out", tmp_path / "union", "--no-minimize")
    assert code == 1, err
    assert {p.name for p in (tmp_path / "union" / "corpus" / "decoder").iterdir()} == union


def test_a_failed_minimization_is_never_reported_minimized(shards, tmp_path, monkeypatch):
    # libFuzzer's -merge=1 failing (atheris missing, a crash, its time): the union is kept, the
    # notes say why, and the harness is not among those reported minimized.
    from kimi_oracle.workflows.nightly import libfuzzer, merge

    monkeypatch.setattr(libfuzzer, "minimize_corpus", lambda name, corpus, work, **kw: (3, "merge failed: why"))
    notes: list[str] = []
    kept = merge._minimize_corpora([merge.read_shard(s) for s in shards], tmp_path, {"decoder": 3}, notes)
    assert kept == {} and notes == ["merge failed: why"]
