"""Fuzzing corpora: the generated seed files, the PNG/JPEG dictionary, and atomic merging.

`seed_files()` builds small image files in the formats and modes that reach the checkpoint's
odd paths (PNG with tRNS and palettes, LA, 16-bit grey, CMYK JPEG and TIFF, GIF, WebP, odd
sizes); `kimi-oracle corpus seed DIR` writes them. `structured_seeds()` are byte strings for
the structured harness: the empty input (the simplest case) and a few patterned ones; the
committed corpus (`fuzz/corpus/structured`) carries the variety of modes and sizes.
A corpus directory holds one file per input, named by the SHA-1 of its content (libFuzzer's
convention), written atomically, so concurrent shards and interrupted runs never leave a
half-written entry.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Iterable

import numpy as np
from PIL import Image, features

from kimi_oracle.core.errors import InputError
from kimi_oracle.core.files import DEFAULT_MAX_BYTES as MAX_ENTRY_BYTES
from kimi_oracle.core.files import atomic_write_bytes, read_file
from kimi_oracle.inputs.generators import CaseParams, make_image

# Tokens libFuzzer splices into inputs: PNG signature and chunk names, JPEG markers, and the
# magic numbers of the other formats the seed corpus uses.
DICTIONARY: tuple[tuple[str, bytes], ...] = (
    ("png_signature", b"\x89PNG\r\n\x1a\n"),
    ("png_IHDR", b"IHDR"),
    ("png_PLTE", b"PLTE"),
    ("png_tRNS", b"tRNS"),
    ("png_IDAT", b"IDAT"),
    ("png_IEND", b"IEND"),
    ("png_gAMA", b"gAMA"),
    ("png_sBIT", b"sBIT"),
    ("png_bKGD", b"bKGD"),
    ("png_iCCP", b"iCCP"),
    ("png_tEXt", b"tEXt"),
    ("png_zTXt", b"zTXt"),
    ("png_iTXt", b"iTXt"),
    ("png_pHYs", b"pHYs"),
    ("png_acTL", b"acTL"),
    ("png_fcTL", b"fcTL"),
    ("png_fdAT", b"fdAT"),
    ("png_eXIf", b"eXIf"),
    ("png_iend_crc", b"\xaeB`\x82"),
    ("png_depth16_grey", b"\x10\x00"),
    ("png_depth8_palette", b"\x08\x03"),
    ("png_depth8_la", b"\x08\x04"),
    ("png_depth8_rgba", b"\x08\x06"),
    ("jpeg_soi", b"\xff\xd8"),
    ("jpeg_eoi", b"\xff\xd9"),
    ("jpeg_app0", b"\xff\xe0"),
    ("jpeg_app1", b"\xff\xe1"),
    ("jpeg_app14_adobe", b"\xff\xee"),
    ("jpeg_dqt", b"\xff\xdb"),
    ("jpeg_sof0", b"\xff\xc0"),
    ("jpeg_sof1", b"\xff\xc1"),
    ("jpeg_sof2", b"\xff\xc2"),
    ("jpeg_dht", b"\xff\xc4"),
    ("jpeg_sos", b"\xff\xda"),
    ("jpeg_dri", b"\xff\xdd"),
    ("jpeg_jfif", b"JFIF\x00"),
    ("jpeg_exif", b"Exif\x00\x00"),
    ("jpeg_adobe", b"Adobe"),
    ("gif87a", b"GIF87a"),
    ("gif89a", b"GIF89a"),
    ("gif_graphic_control", b"\x21\xf9\x04"),
    ("gif_image", b"\x2c"),
    ("gif_trailer", b"\x3b"),
    ("tiff_le", b"II*\x00"),
    ("tiff_be", b"MM\x00*"),
    ("webp_riff", b"RIFF"),
    ("webp_webp", b"WEBP"),
    ("webp_vp8", b"VP8 "),
    ("webp_vp8l", b"VP8L"),
    ("webp_vp8x", b"VP8X"),
    ("webp_alph", b"ALPH"),
    ("bmp", b"BM"),
)


def dictionary_text() -> str:
    """The dictionary in libFuzzer's `-dict=` format."""
    lines = ["# PNG / JPEG (and GIF, TIFF, WebP) tokens for the decoder harness.",
             "# Generated from kimi_oracle.inputs.corpus.DICTIONARY; `kimi-oracle corpus dict` rewrites it."]
    for name, token in DICTIONARY:
        body = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\x{b:02X}" for b in token)
        lines.append(f'{name}="{body}"')
    return "\n".join(lines) + "\n"


def _encode(img: Image.Image, fmt: str, **params: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **params)
    return buf.getvalue()


# The generated decoder seeds, in order: file name (its extension names the format, as Pillow
# registers it) and the image's CaseParams (w, h, mode, alpha, content, seed).
_SEEDS: tuple[tuple[str, int, int, str, str, str, int], ...] = (
    # PNG: palettes with tRNS (one key entry, and a full alpha table), LA, 16-bit grey, RGB key.
    ("png_p_trns_key_29x17.png", 29, 17, "P", "key", "edges", 1),
    ("png_p_trns_table_30x31.png", 30, 31, "P", "checker", "gradient", 2),
    ("png_p_opaque_57x3.png", 57, 3, "P", "opaque", "edges", 3),
    ("png_la_gradient_15x28.png", 15, 28, "LA", "gradient", "gradient", 4),
    ("png_la_single_pixel_1x1.png", 1, 1, "LA", "single_pixel", "flat", 5),
    ("png_i16_grey_33x13.png", 33, 13, "I;16", "opaque", "gradient", 6),
    ("png_l_trns_13x7.png", 13, 7, "L", "key", "noise", 7),
    ("png_rgb_trns_9x27.png", 9, 27, "RGB", "key", "edges", 8),
    ("png_rgba_checker_28x29.png", 28, 29, "RGBA", "checker", "noise", 9),
    ("png_rgba_transparent_2x3.png", 2, 3, "RGBA", "transparent", "noise", 10),
    ("png_1bit_41x5.png", 41, 5, "1", "opaque", "edges", 11),
    ("png_rgb_wide_300x2.png", 300, 2, "RGB", "opaque", "gradient", 12),
    # CMYK as JPEG (Adobe APP14, inverted) and as TIFF.
    ("jpeg_cmyk_23x19.jpg", 23, 19, "CMYK", "opaque", "gradient", 13),
    ("tiff_cmyk_23x19.tif", 23, 19, "CMYK", "opaque", "gradient", 13),
    ("jpeg_rgb_57x29.jpg", 57, 29, "RGB", "opaque", "edges", 14),
    ("jpeg_grey_31x14.jpg", 31, 14, "L", "opaque", "noise", 15),
    ("jpeg_progressive_17x33.jpg", 17, 33, "RGB", "opaque", "gradient", 16),
    ("tiff_i16_11x29.tif", 11, 29, "I;16", "opaque", "gradient", 17),
    ("tiff_f_7x9.tif", 7, 9, "F", "opaque", "noise", 18),
    ("tiff_la_10x10.tif", 10, 10, "LA", "random", "noise", 19),
    # GIF with a transparent index, and a plain one.
    ("gif_trns_27x15.gif", 27, 15, "P", "key", "edges", 20),
    ("gif_opaque_3x101.gif", 3, 101, "P", "opaque", "noise", 21),
    # WebP only where this Pillow has it.
    ("webp_rgba_lossless_29x14.webp", 29, 14, "RGBA", "gradient", "edges", 22),
    ("webp_rgb_lossy_14x29.webp", 14, 29, "RGB", "opaque", "gradient", 23),
    ("bmp_rgb_5x3.bmp", 5, 3, "RGB", "opaque", "noise", 24),
)
# Save options other than the image's own transparency key (always saved where it has one).
_SAVE_OPTIONS: dict[str, dict[str, object]] = {
    "jpeg_cmyk_23x19.jpg": {"quality": 90},
    "jpeg_rgb_57x29.jpg": {"quality": 75},
    "jpeg_grey_31x14.jpg": {"quality": 80},
    "jpeg_progressive_17x33.jpg": {"quality": 85, "progressive": True},
    "webp_rgba_lossless_29x14.webp": {"lossless": True},
    "webp_rgb_lossy_14x29.webp": {"quality": 70},
}


def seed_files() -> dict[str, bytes]:
    """name -> bytes of the generated decoder seeds (small, deterministic)."""
    out: dict[str, bytes] = {}
    extensions = Image.registered_extensions()
    webp = features.check("webp")
    for name, *params in _SEEDS:
        fmt = extensions[os.path.splitext(name)[1]]
        if fmt == "WEBP" and not webp:
            continue
        img = make_image(CaseParams(*params))
        key = {"transparency": img.info["transparency"]} if "transparency" in img.info else {}
        out[name] = _encode(img, fmt, **key, **_SAVE_OPTIONS.get(name, {}))
    return out


def structured_seeds() -> dict[str, bytes]:
    """name -> bytes for the structured harness: empty input, and patterned ones."""
    out = {"empty": b""}
    rng = np.random.default_rng(2024)
    for n in (8, 16, 24, 32, 48, 64):
        out[f"random_{n}"] = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    out["ones_32"] = b"\x01" * 32
    out["ff_32"] = b"\xff" * 32
    out["ramp_40"] = bytes(range(40))
    return out


def entry_name(data: bytes) -> str:
    """libFuzzer's corpus file name: the SHA-1 of the content."""
    return hashlib.sha1(data).hexdigest()


def add_entry(directory: str | os.PathLike, data: bytes, name: str | None = None) -> bool:
    """Store `data` in a corpus directory atomically; False when it was already there."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / (name or entry_name(data))
    if target.exists():
        return False
    # The temporary file's name starts with a dot: entries() never lists a half-written one.
    atomic_write_bytes(target, data)
    return True


def entries(directory: str | os.PathLike) -> list[Path]:
    """The corpus files of a directory (temporary and hidden files excluded), sorted."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))


def merge(source: str | os.PathLike, target: str | os.PathLike) -> int:
    """Copy the entries of `source` missing from `target` (by content name); the count added."""
    added = 0
    for path in entries(source):
        try:
            data = read_file(path, max_bytes=MAX_ENTRY_BYTES)  # a regular file, capped (core.files)
        except InputError:
            continue
        if add_entry(target, data):
            added += 1
    return added


def shard_entries(paths: Iterable[Path], shard: tuple[int, int]) -> list[Path]:
    """The entries shard I of N starts from (by content hash, so stable across machines)."""
    index, count = shard
    if count <= 1:
        return list(paths)
    out = []
    for p in paths:
        digest = hashlib.sha1(p.name.encode()).digest()
        if int.from_bytes(digest[:4], "big") % count == index - 1:
            out.append(p)
    return out


def write_seed_corpus(directory: str | os.PathLike, *, structured_dir: str | os.PathLike | None = None) -> list[Path]:
    """Write the decoder seeds (readable names) into `directory`; optionally the structured ones."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in seed_files().items():
        path = directory / name
        if add_entry(directory, data, name=name) or path.exists():
            written.append(path)
    if structured_dir is not None:
        for name, data in structured_seeds().items():
            add_entry(structured_dir, data, name=name)
    return written


__all__ = [
    "DICTIONARY",
    "add_entry",
    "dictionary_text",
    "entries",
    "entry_name",
    "merge",
    "seed_files",
    "shard_entries",
    "structured_seeds",
    "write_seed_corpus",
]
