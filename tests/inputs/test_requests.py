"""Inputs as requests carry them (issue 16): files, EXIF orientation, ICC, animations, odd DPI,
encoded bytes handed to candidates, and what the checkpoint (the reference) does with each.

Expected values come from Pillow itself (opening the same bytes again, `ImageOps.exif_transpose`,
`Image.seek`) or from the images' own pixels rebuilt in memory, never from the code under test.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from cli_run import exit_code_of as run_cli
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.images import encoded_bytes, pack_raw, unpack_raw
from kimi_oracle.inputs import requests
from kimi_oracle.inputs.generators import (
    MODES,
    MORE_KEY_MODES,
    CaseParams,
    alpha_patterns_for,
    images_equal,
    make_image,
    vary_config,
)
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.oracle.judge import evaluate
from kimi_oracle.pipelines import reference

PLANTED = str(Path(__file__).resolve().parents[1] / "mutants" / "planted.py")
K3 = PreprocessConfig.k3()
RESIZING = vary_config(K3, in_patch_limit=4)  # 40x30 images resample


def in_memory(img: Image.Image) -> Image.Image:
    """The same pixels, palette and transparency, built in memory: no file, EXIF, ICC or frames."""
    out = Image.frombytes(img.mode, img.size, img.tobytes())
    if img.mode in ("P", "PA"):
        out.putpalette(img.getpalette())
    if "transparency" in img.info:
        out.info["transparency"] = img.info["transparency"]
    return out


def same_result(a, b) -> bool:
    return torch.equal(a.pixel_values, b.pixel_values) and torch.equal(a.grid_thws, b.grid_thws)


# ---------------------------------------------------------------------------------------------
# the input space


def test_existing_params_are_unchanged():
    # No request: an image built in memory, and a dict without the new keys (golden files keep theirs).
    p = CaseParams(7, 5, "P", "key", "edges", 3)
    assert set(p.to_dict()) == {"width", "height", "mode", "alpha", "content", "seed", "square"}
    assert encoded_bytes(make_image(p)) is None and p.request == {}
    q = CaseParams(7, 5, "P", container="gif", frames=3, disposal=2)
    assert CaseParams.from_dict(q.to_dict()) == q and q.request == {"container": "gif", "frames": 3, "disposal": 2}


@pytest.mark.parametrize("bad", [dict(orientation=6), dict(container="bmp", orientation=3), dict(container="gif", icc="srgb"),
                                 dict(container="jpeg", frames=2), dict(container="png", mode="CMYK"),
                                 dict(container="png", frames=2, disposal=3), dict(container="nope"),
                                 dict(container="gif"),  # Pillow would quantize RGB to P
                                 dict(container="webp", mode="RGBA", alpha="opaque"),  # libwebp: back as RGB
                                 dict(container="png", mode="P", frames=2)])  # APNG of P: back as RGB
def test_inexpressible_requests_are_refused(bad):
    with pytest.raises(ValueError):
        CaseParams(9, 9, **{"mode": "RGB", **bad})


@pytest.mark.parametrize("container", ["png", "jpeg", "jpeg-444", "jpeg-progressive", "webp", "webp-lossless"])
def test_exif_orientation_is_carried_the_way_pillow_carries_it(container):
    for orientation in requests.ORIENTATIONS:
        img = make_image(CaseParams(30, 20, container=container, orientation=orientation, seed=orientation))
        again = Image.open(io.BytesIO(encoded_bytes(img)))
        assert "exif" in img.info and img.getexif()[0x0112] == orientation == again.getexif()[0x0112]
        transposed = ImageOps.exif_transpose(again)
        assert transposed.size == ((20, 30) if orientation >= 5 else (30, 20))


def test_containers_carry_what_they_say():
    jpeg = make_image(CaseParams(30, 20, container="jpeg-progressive", icc="srgb", dpi=7))
    assert jpeg.format == "JPEG" and jpeg.info["progressive"] and jpeg.info["dpi"] == (7, 7)
    assert jpeg.info["icc_profile"] == requests.icc_profile("srgb")
    # 4:4:4 against 4:2:0: Pillow reports the subsampling it reads from the file.
    from PIL import JpegImagePlugin

    assert JpegImagePlugin.get_sampling(make_image(CaseParams(30, 20, container="jpeg-444"))) == 0
    assert JpegImagePlugin.get_sampling(make_image(CaseParams(30, 20, container="jpeg"))) == 2
    png = make_image(CaseParams(30, 20, "P", "key", container="png", dpi=301))
    assert png.format == "PNG" and png.info["transparency"] == make_image(CaseParams(30, 20, "P", "key")).info["transparency"]
    assert round(png.info["dpi"][0]) == 301
    for name, mode in (("gif", "P"), ("tiff", "RGB"), ("bmp", "RGB"), ("webp", "RGB")):
        assert make_image(CaseParams(30, 20, mode, container=name)).format == requests.CONTAINERS[name].format


@pytest.mark.parametrize("container, mode, disposal", [("gif", "P", 2), ("gif", "P", 3), ("png", "RGBA", 1),
                                                       ("png", "LA", 2), ("webp", "RGBA", 0)])
def test_animations_have_frames_of_different_sizes(container, mode, disposal):
    alpha = "gradient" if mode in ("RGBA", "LA") else "opaque"
    img = make_image(CaseParams(30, 20, mode, alpha, container=container, frames=3, disposal=disposal))
    again = Image.open(io.BytesIO(encoded_bytes(img)))
    assert again.n_frames == 3 and img.n_frames == 3 and img.tell() == 0
    again.seek(1)
    if container != "webp":  # WebP frames all have the canvas size
        (x0, y0, x1, y1) = again.tile[0][1]
        assert (x1 - x0, y1 - y0) == (20, 14)  # frame 1: two thirds of the canvas
    if container in ("gif", "png"):
        assert again.disposal_method == disposal if container == "gif" else again.info["disposal"] == disposal


def test_every_drawn_request_is_expressible():
    # draw_request with pseudo-random choices: every mode's draws build (and reopen) a case.
    rng = random.Random(5)
    kinds = set()
    for i in range(400):
        mode = MODES[i % len(MODES)]
        alphas = alpha_patterns_for(mode) + (("key",) if mode in MORE_KEY_MODES else ())
        alpha = alphas[(i // len(MODES)) % len(alphas)]
        request = requests.draw_request(lambda options: options[rng.randrange(len(options))], mode, alpha)
        params = CaseParams(11, 7, mode, alpha, seed=i, **request)
        img = make_image(params)
        assert (encoded_bytes(img) is None) == (not request)
        assert img.mode == mode  # --modes restricts what candidates get: a file opens in the drawn mode
        # and keeps the drawn transparency (a key only in PNG / GIF, a palette's alpha only in PNG)
        assert ("transparency" in img.info) == ("transparency" in make_image(CaseParams(11, 7, mode, alpha, seed=i)).info)
        kinds.add("exif" if params.orientation else "animation" if params.frames > 1 else "file" if request else "memory")
    assert kinds == {"memory", "file", "exif", "animation"}
    # The simplest choice everywhere is an image built in memory (what shrinking goes to).
    assert requests.draw_request(lambda options: options[0], "RGB") == {}


def test_the_raw_container_sends_a_file_as_its_bytes():
    img = make_image(CaseParams(30, 20, "P", container="gif", frames=3))
    again = unpack_raw(pack_raw(img))
    assert again.n_frames == 3 and encoded_bytes(again) == encoded_bytes(img) and images_equal(again, img)


# ---------------------------------------------------------------------------------------------
# what the checkpoint does with each kind (Pillow 13.0)


@pytest.mark.parametrize("container", ["png", "jpeg", "webp-lossless"])
def test_the_checkpoint_ignores_exif_orientation_and_icc(container):
    for orientation in (3, 6, 8):
        img = make_image(CaseParams(40, 30, container=container, orientation=orientation, icc="srgb"))
        assert same_result(reference.preprocess([img], RESIZING), reference.preprocess([in_memory(img)], RESIZING))


@pytest.mark.parametrize("container, mode", [("gif", "P"), ("png", "RGBA"), ("webp", "RGB")])
def test_the_checkpoint_uses_the_frame_pillow_opens_on(container, mode):
    params = CaseParams(40, 30, mode, "random" if mode == "RGBA" else "opaque", container=container, frames=3)
    img = make_image(params)
    frames = Image.open(io.BytesIO(encoded_bytes(img)))
    first = frames.copy()
    frames.seek(2)
    last = frames.copy()
    got = reference.preprocess([img], RESIZING)
    assert same_result(got, reference.preprocess([first], RESIZING))
    assert not same_result(got, reference.preprocess([last], RESIZING))  # the frames do differ


def test_the_checkpoint_ignores_dpi():
    img = make_image(CaseParams(40, 30, container="png", dpi=1))
    assert same_result(reference.preprocess([img], RESIZING), reference.preprocess([in_memory(img)], RESIZING))


# ---------------------------------------------------------------------------------------------
# encoded inputs


def test_a_bytes_candidate_receives_the_file_and_a_lossless_encoding_otherwise():
    seen = []

    def candidate(files, config):
        seen.extend(files)
        return reference.preprocess([Image.open(io.BytesIO(f)) for f in files], config)

    candidate.kimi_oracle_input = "bytes"
    jpeg = make_image(CaseParams(40, 30, container="jpeg", orientation=6))
    cmyk = make_image(CaseParams(40, 30, "CMYK"))
    p_key = make_image(CaseParams(40, 30, "P", "key"))
    verdict = evaluate(Candidate("bytes", candidate), [jpeg, cmyk, p_key], RESIZING)
    assert verdict.ok, verdict.message
    assert seen[0] == encoded_bytes(jpeg)
    assert images_equal(Image.open(io.BytesIO(seen[1])), cmyk) and images_equal(Image.open(io.BytesIO(seen[2])), p_key)


def test_input_forms_are_declared_and_checked():
    def both(images, config):
        return reference.preprocess([Image.open(io.BytesIO(i)) if isinstance(i, bytes) else i for i in images], config)

    both.kimi_oracle_input = ("pil", "bytes")
    c = Candidate("both", both)
    assert c.accepts == ("pil", "bytes") and c.use_input_form(None) == "both"
    images = [make_image(CaseParams(20 + i, 20, container="png" if i % 2 else "")) for i in range(8)]
    assert evaluate(c, images, RESIZING).ok
    plain = Candidate("plain", reference.preprocess)
    with pytest.raises(CandidateError):
        plain.use_input_form("bytes")

    def bad(images, config):
        return None

    bad.kimi_oracle_input = "path"
    with pytest.raises(CandidateError):
        Candidate("bad", bad).use_input_form(None)


def test_a_pil_candidate_gets_the_file_with_its_frames_and_exif():
    got = []

    def candidate(images, config):
        got.extend((getattr(i, "n_frames", 1), i.getexif().get(0x0112)) for i in images)
        for i in images:
            i.seek(i.n_frames - 1)  # its own copy: the reference's image stays on frame 0
        return reference.preprocess([i.copy() for i in images], config)

    img = make_image(CaseParams(40, 30, container="png", frames=2, orientation=6))
    verdict = evaluate(Candidate("frames", candidate), [img], RESIZING, invariance=False)
    assert got == [(2, 6)] and img.tell() == 0 and verdict.check == "pixel_mismatch"



def test_fuzz_runs_a_bytes_candidate_with_input_form_bytes(tmp_path, capsys):
    # The "done when": a bytes-taking candidate runs on encoded inputs (in its sandbox).
    code = run_cli("fuzz", "--candidate", f"{PLANTED}:bytes_correct", "--input-form", "bytes", "--examples", "25",
                   "--seed", "2", "--no-invariance", "--out", tmp_path)
    assert code == 0, capsys.readouterr().out
    code = run_cli("fuzz", "--candidate", f"{PLANTED}:correct", "--input-form", "bytes", "--examples", "5",
                   "--out", tmp_path)
    assert code == 2 and "does not take bytes" in capsys.readouterr().err


def test_a_finding_stores_a_request_as_its_file(tmp_path):
    # So that `repro` replays the frames, the EXIF and the decoder's input, not a PNG of frame 0.
    from kimi_oracle.results.report import encode_input, load_input

    img = make_image(CaseParams(30, 20, "P", container="gif", frames=3, disposal=1))
    ext, data = encode_input(img)
    assert (ext, data) == ("gif", encoded_bytes(img))
    (tmp_path / f"input.{ext}").write_bytes(data)
    back = load_input(tmp_path / f"input.{ext}")
    assert back.n_frames == 3 and images_equal(back, img)
    assert encode_input(make_image(CaseParams(30, 20, "P")))[0] == "png"  # in memory: as before


def test_an_isolated_candidate_receives_requests_intact():
    # In its executor process a PIL candidate gets the file (frames), a bytes candidate its bytes.
    from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

    gif = make_image(CaseParams(40, 30, "P", container="gif", frames=3, disposal=1))
    with IsolatedCandidate(f"{PLANTED}:last_frame") as isolated:
        isolated.start()
        assert isolated.accepts == ("pil",)
        assert evaluate(isolated, [gif], RESIZING, invariance=False).check == "pixel_mismatch"
        assert evaluate(isolated, [make_image(CaseParams(40, 30))], RESIZING, invariance=False).ok
    with IsolatedCandidate(f"{PLANTED}:bytes_jpeg_own_colour_conversion") as isolated:
        assert isolated.use_input_form(None) == "bytes"
        jpeg = make_image(CaseParams(40, 30, container="jpeg"))
        assert evaluate(isolated, [jpeg], RESIZING, invariance=False).check == "pixel_mismatch"
        assert evaluate(isolated, [gif], RESIZING, invariance=False).ok


def test_transparency_keys_of_1_and_16_bit_images_as_pillow_carries_them():
    # PNG's tRNS holds a key for "1" and "I;16" too; Pillow 13.0 honours both in convert("RGBA"),
    # and the checkpoint composites them (has_alpha: a transparency entry) on its background.
    for mode in ("1", "I;16"):
        img = make_image(CaseParams(40, 30, mode, "key", container="png"))
        assert img.mode == mode and "transparency" in img.info
        assert set(np.asarray(img.convert("RGBA"))[..., 3].ravel().tolist()) == {0, 255}
        assert not same_result(reference.preprocess([img], RESIZING),
                               reference.preprocess([in_memory_without_key(img)], RESIZING))


def in_memory_without_key(img: Image.Image) -> Image.Image:
    return Image.frombytes(img.mode, img.size, img.tobytes())


@pytest.mark.slow  # 2.4 s; the default run covers bytes through the sandbox with fuzz --input-form bytes
def test_check_hands_real_files_to_a_bytes_candidate(tmp_path, capsys, corpus_dir):
    # A real JPEG as its own bytes: the candidate's own colour conversion is named `decoder`.
    code = run_cli("check", "--candidate", f"{PLANTED}:bytes_jpeg_own_colour_conversion", "--no-invariance",
                   "--out", tmp_path, "--json", tmp_path / "run.json", corpus_dir / "decodable" / "hopper.jpg",
                   corpus_dir / "decodable" / "200x32_p.png")
    assert code == 1, capsys.readouterr().out
    import json

    findings = json.loads((tmp_path / "run.json").read_text())["findings"]
    assert [(f["check"], f["root_causes"]) for f in findings] == [("pixel_mismatch", ["decoder"])]


@pytest.mark.parametrize("container", [n for n, c in requests.CONTAINERS.items() if c.format == "JPEG"])
def test_noise_fills_every_jpeg_container(container):
    # A 253x202 RGB noise image at 4:4:4 compresses to more than one byte a pixel: Pillow's
    # default encoder buffer for progressive JPEGs was too small for it (OSError "broken data
    # stream", seen in a gate's fuzz stage). Pillow must read back what was written, at that size.
    params = CaseParams(253, 202, "RGB", "opaque", "noise", seed=991335036, container=container, icc="srgb", dpi=7)
    img = make_image(params)
    assert img.format == "JPEG" and img.size == (253, 202)
    assert Image.open(io.BytesIO(encoded_bytes(img))).convert("RGB").size == (253, 202)


def test_the_drawn_icc_profile_is_the_same_bytes_every_time():
    # littlecms dates a profile it writes (ICC header bytes 24-35); the drawn profile carries a
    # fixed date instead, so a case's file is reproducible. Pillow reads it back as sRGB.
    import io

    from PIL import ImageCms

    data = requests.icc_profile("srgb")
    assert data[24:36] == bytes.fromhex("07ea00010001000000000000")  # 2026-01-01 00:00:00
    assert data[84:100] == bytes(16)  # no profile ID covering the date
    fresh = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    assert len(fresh) == len(data) and fresh[:24] == data[:24] and fresh[36:] == data[36:]
    profile = ImageCms.ImageCmsProfile(io.BytesIO(data))
    assert "sRGB" in ImageCms.getProfileDescription(profile)
