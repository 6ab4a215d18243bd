import io

import numpy as np
import pytest
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core import images
from kimi_oracle.core.images import decode, default_max_pixels, has_alpha, load_images, resample_kind
from kimi_oracle.pipelines import reference


def png_bytes(img):
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def test_default_cap_is_pillows_bomb_threshold():
    assert default_max_pixels() == 2 * Image.MAX_IMAGE_PIXELS


def test_pixel_cap_is_enforced_and_configurable():
    data = png_bytes(Image.new("RGB", (20, 10)))
    assert decode(data, max_pixels=200).size == (20, 10)
    with pytest.raises(InputError, match="exceeds the pixel cap of 199"):
        decode(data, max_pixels=199)


@pytest.mark.parametrize(
    "source, reason",
    [
        (b"", "empty input"),
        (b"not an image at all", "not an image format"),
        ("data:image/png;base64,@@@", "malformed base64"),
        ("data:image/png;base64", "malformed data URL"),
        (np.zeros((0, 4, 3), np.uint8), "empty size"),
        (np.zeros((4, 4, 3), np.float32), "must be uint8"),
        (np.zeros((4, 4, 5), np.uint8), "HxW or HxWxC"),
        (12345, "unsupported input type"),
    ],
)
def test_bad_inputs_raise_input_error(source, reason):
    with pytest.raises(InputError, match=reason):
        decode(source)


def test_truncated_png_names_file(tmp_path):
    data = png_bytes(Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8)))
    path = tmp_path / "cut.png"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as info:
        decode(path)
    assert str(path) in str(info.value) and "truncated" in str(info.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        decode(tmp_path / "nope.png")
    with pytest.raises(InputError, match="directory"):
        decode(tmp_path)


def test_empty_batch_is_an_error():
    with pytest.raises(InputError, match="no images"):
        reference.preprocess([], PreprocessConfig.k3())


def test_batch_error_names_the_index():
    with pytest.raises(InputError, match=r"image\[1\]"):
        load_images([Image.new("RGB", (3, 3)), b"junk"])


def test_mode_rules_follow_pillow():
    assert has_alpha(Image.new("RGBA", (2, 2)))
    assert has_alpha(Image.new("LA", (2, 2)))
    assert has_alpha(Image.new("PA", (2, 2)))
    p = Image.new("P", (2, 2))
    assert not has_alpha(p)
    p.info["transparency"] = 0
    assert has_alpha(p)
    assert not has_alpha(Image.new("RGBX", (2, 2)))
    assert resample_kind("P", (4, 4), (2, 2)) == "nearest"
    assert resample_kind("1", (4, 4), (2, 2)) == "nearest"
    assert resample_kind("RGBA", (4, 4), (2, 2)) == "premultiplied"
    assert resample_kind("LA", (4, 4), (2, 2)) == "premultiplied"
    assert resample_kind("CMYK", (4, 4), (2, 2)) == "bicubic"
    assert resample_kind("RGBA", (4, 4), (4, 4)) == "none"


def test_resample_kind_matches_pillow_behaviour():
    # Evidence from Pillow itself: a P image resized "bicubic" gives exactly NEAREST's bytes,
    # and an RGBA resize equals the premultiplied round trip.
    rng = np.random.default_rng(1)
    p = Image.fromarray(rng.integers(0, 8, (20, 30), np.uint8), "P")
    assert p.resize((11, 7), Image.BICUBIC).tobytes() == p.resize((11, 7), Image.NEAREST).tobytes()
    rgba = Image.fromarray(rng.integers(0, 256, (20, 30, 4), np.uint8), "RGBA")
    manual = rgba.convert("RGBa").resize((11, 7), Image.BICUBIC).convert("RGBA")
    assert rgba.resize((11, 7), Image.BICUBIC).tobytes() == manual.tobytes()


def test_raw_container_round_trips_what_the_checkpoint_reads():
    # One container for finding inputs of last resort and for images sent to a sandbox.
    from kimi_oracle.core.images import pack_raw, unpack_raw

    p = Image.new("P", (5, 3))
    p.putpalette(bytes(range(256)) * 4, rawmode="RGBA")
    p.putdata([0, 1, 2, 3, 4] * 3)
    p.info.update(transparency=b"\x00\x80\xff", dpi=(72, 72.5), comment="c")
    la = Image.new("LA", (2, 2), (10, 200))
    la.info["transparency"] = 7
    for img in (p, la, Image.new("I;16", (3, 1), 60000), Image.new("F", (1, 1), -1.5)):
        back = unpack_raw(pack_raw(img))
        assert (back.mode, back.size, back.tobytes()) == (img.mode, img.size, img.tobytes())
        assert back.info == img.info
        if img.mode == "P":
            assert back.getpalette(rawmode="RGBA") == img.getpalette(rawmode="RGBA")
    with pytest.raises(InputError):
        unpack_raw(b"KIMIRAW1\x05\x00\x00\x00{bad}")
    with pytest.raises(InputError):
        unpack_raw(b"PNG...")


def _bomb_gif() -> bytes:
    """A 37-byte GIF: a 1×1 screen announcing one 60000×60000 frame (disposal 2), built by hand."""
    import struct

    return (b"GIF89a" + struct.pack("<HH", 1, 1) + b"\x00\x00\x00"
            + b"\x21\xf9\x04\x08\x00\x00\x00\x00"                    # graphic control: disposal 2
            + b"\x2c" + struct.pack("<HHHH", 0, 0, 60000, 60000) + b"\x00"
            + b"\x02\x02\x4c\x01\x00" + b"\x3b")


def test_bomb_gif_is_refused_before_it_is_allocated():
    # Measured in a fresh process (VmHWM: the peak resident size of its own memory, which unlike
    # ru_maxrss does not carry the parent's peak across exec).
    import subprocess
    import sys

    script = ("import re, sys\n"
              "from kimi_oracle.core.images import decode\n"
              "from kimi_oracle.core.errors import InputError\n"
              "try:\n    decode(sys.stdin.buffer.read(), name='bomb.gif')\n    print('DECODED')\n"
              "except InputError as exc:\n    print('REFUSED', exc)\n"
              "print(int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) // 1024)\n")
    proc = subprocess.run([sys.executable, "-c", script], input=_bomb_gif(), capture_output=True, timeout=120)
    out = proc.stdout.decode().splitlines()
    assert proc.returncode == 0 and out[0].startswith("REFUSED bomb.gif: exceeds the pixel cap"), proc.stderr
    assert int(out[-1]) < 200, f"refusing the bomb took {out[-1]} MB"


def test_only_regular_files_are_read(tmp_path):
    import os

    from kimi_oracle.core.images import read_file

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file \\(a FIFO\\)"):
        decode(fifo)  # would block forever if it were opened for a blocking read
    with pytest.raises(InputError, match="not a regular file \\(a character device\\)"):
        decode("/dev/zero")  # would be read until memory runs out
    with pytest.raises(InputError, match="is a directory"):
        decode(tmp_path)
    big = tmp_path / "big.png"
    big.write_bytes(b"\x89PNG" + bytes(100))
    with pytest.raises(InputError, match="exceeds the byte cap of 50"):
        read_file(big, max_bytes=50)
    assert read_file(big, max_bytes=104) == big.read_bytes()


def test_cli_refuses_devices_with_one_line(tmp_path, capsys):
    from kimi_oracle.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["explain", "/dev/zero"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "not a regular file" in err[0]


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_convert_gives_pillows_own_bytes_for_lab(mode):
    # core.images.convert applies a LAB -> sRGB transform built once; Pillow's Image.convert
    # builds it on every call. The oracle is Pillow itself: the same bytes on every LAB value
    # pattern (an L ramp against a and b in both signs).
    rng = np.random.default_rng(7)
    arr = rng.integers(0, 256, (13, 17, 3), dtype=np.uint8)
    arr[0, :, 0] = np.arange(17) * 15
    lab = Image.frombytes("LAB", (17, 13), arr.tobytes())
    got = images.convert(lab, mode)
    want = lab.convert(mode)
    assert got.mode == want.mode == mode
    assert got.tobytes() == want.tobytes()
    # other modes are Pillow's convert as is
    rgba = Image.new("RGBA", (3, 2), (10, 20, 30, 40))
    assert images.convert(rgba, "RGB").tobytes() == rgba.convert("RGB").tobytes()
