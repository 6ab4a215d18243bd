import json
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_oracle.cli import main

CORPUS = Path(__file__).parent.parent / "data" / "corpus"


def run(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_explain_json(capsys):
    path = CORPUS / "decodable" / "p_trns_single.png"
    code, out, err = run(["explain", str(path), "--json"], capsys)
    assert code == 0 and err == ""
    doc = json.loads(out)
    (row,) = doc["images"]
    assert (row["width"], row["height"], row["mode"]) == (64, 64, "P")
    assert row["alpha"] == "transparency key"
    # K3 default profile: 64x64 is not resized; padded to 84x84 = 6x6 patches, 9 tokens.
    assert row["grid_thw"] == [1, 6, 6] and row["num_tokens"] == 9
    assert row["resample"] == "none"
    assert "chessboard" in row["background"] and "after resize" in row["background"]


def test_explain_small_profile_shows_resampling(capsys):
    path = CORPUS / "decodable" / "uncompressed_la.png"
    code, out, _ = run(["explain", str(path), "--profile", "k3-small", "--json"], capsys)
    row = json.loads(out)["images"][0]
    assert code == 0 and row["mode"] == "LA" and row["resample"] == "premultiplied"
    code, out, _ = run(["explain", str(path), "--profile", "k25", "--json"], capsys)
    row = json.loads(out)["images"][0]
    assert row["resize_mode"] == "RGB" and row["background"].startswith("none")


def test_explain_config_file(tmp_path, capsys):
    cfg = tmp_path / "preprocessor_config.json"
    cfg.write_text(json.dumps({"media_proc_cfg": {
        "patch_size": 14, "merge_kernel_size": 2, "in_patch_limit": 4, "patch_limit_on_one_side": 512,
        "fixed_output_tokens": None, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}}))
    code, out, _ = run(["explain", str(CORPUS / "decodable" / "hopper.jpg"), "--config", str(cfg), "--json"], capsys)
    row = json.loads(out)["images"][0]
    # 128x128 with a 4-patch budget: sqrt(4 / 81) * 128 = 28.44 -> 28.
    assert code == 0 and (row["new_w"], row["new_h"]) == (28, 28) and row["resample"] == "bicubic"


def test_explain_table(capsys):
    code, out, _ = run(["explain", str(CORPUS / "decodable" / "hopper.jpg")], capsys)
    assert code == 0 and "hopper.jpg" in out and "128x128" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["explain", "/nonexistent.png"], "no such file"),
        (["explain", str(CORPUS / "undecodable" / "shortfile.bmp")], "truncated"),
        (["explain", "x.png", "--config", "/nonexistent.json"], "cannot read"),
        (["explain", "x.png", "--profile", "k3", "--config", "/x.json"], "not both"),
        (["explain", "x.png", "--profile", "k9"], "Invalid value"),
    ],
)
def test_errors_are_one_line_exit_2(argv, message, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_console_script_end_to_end():
    proc = subprocess.run(
        [sys.executable, "-m", "kimi_oracle", "explain", str(CORPUS / "decodable" / "la.tga"),
         str(CORPUS / "undecodable" / "zero_width.gif"), "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["images"][0]["mode"] == "LA"
    assert proc.stderr.count("\n") == 1 and "zero_width.gif" in proc.stderr
