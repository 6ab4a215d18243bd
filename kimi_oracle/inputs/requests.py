"""Inputs as requests carry them: files, EXIF orientation, ICC profiles, animations, odd DPI.

A request does not hand an engine a clean in-memory image: it hands it a file (a phone photo
with an EXIF orientation, an animated GIF, a screenshot with an ICC profile). This module owns
that part of the input space, once:

* the containers a case can be encoded in (`CONTAINERS`: PNG/APNG, JPEG baseline or progressive
  with 4:2:0 or 4:4:4 chroma, GIF, WebP lossy or lossless, TIFF, BMP), which metadata each one
  can carry and which modes it stores;
* `encode`: the file bytes of a case's frames with its metadata;
* `draw_request`: how the fuzzers draw that metadata (one definition, for every engine: it takes
  a `choose(options)` callable, the simplest option first).

The image a case stands for is the file as Pillow opens it (`core.images.open_encoded`): frame 0,
`info["exif"]` / `getexif()`, `info["icc_profile"]`, `info["dpi"]`, `n_frames`. The checkpoint
ignores orientation and ICC and uses the frame Pillow opens on (docs/inputs.md, measured).
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from PIL import Image, ImageFile

from kimi_oracle.core.images import ORIENTATION_TAG, PNG_MODES

# The EXIF Orientation values (of core.images.ORIENTATION_TAG): 1 is "as stored", 2-8 mirror
# and/or rotate.
ORIENTATIONS = (1, 2, 3, 4, 5, 6, 7, 8)
# Orientations whose transpose swaps width and height.
SWAPPING_ORIENTATIONS = frozenset({5, 6, 7, 8})
ICC_PROFILES = ("srgb",)
# DPI values real files carry and engines have choked on: 1, odd, huge.
ODD_DPIS = (1, 7, 301, 4000)
FRAME_COUNTS = (2, 3)


@dataclass(frozen=True)
class Container:
    """A file format a case can be encoded in, and what it carries."""

    name: str
    format: str                     # Pillow's format name
    options: tuple[tuple[str, Any], ...]
    modes: tuple[str, ...]          # the modes it is drawn for: Pillow opens the file in the same mode
    exif: bool = False
    icc: bool = False
    animated: bool = False
    dpi: bool = False
    disposals: tuple[int, ...] = (0,)
    lossy: bool = False
    animated_modes: tuple[str, ...] = ("RGB", "RGBA", "P", "L", "LA")  # of its modes, those animated
    drops_opaque_alpha: bool = False  # an RGBA image whose alpha is all 255 comes back RGB (libwebp)
    keys: bool = False  # stores a `transparency` key (PNG tRNS, GIF's transparent index)


CONTAINERS: dict[str, Container] = {c.name: c for c in (
    Container("png", "PNG", (), PNG_MODES, exif=True, icc=True, animated=True, dpi=True, disposals=(0, 1, 2), keys=True,
              # Pillow 13 cannot write an L-mode APNG with disposal 1 or 2 ("images do not match"),
              # and writes a P-mode one as RGB (its frames' palettes differ)
              animated_modes=("RGB", "RGBA", "LA")),
    Container("jpeg", "JPEG", (("quality", 90), ("subsampling", "4:2:0")), ("RGB", "L", "CMYK"),
              exif=True, icc=True, dpi=True, lossy=True),
    Container("jpeg-444", "JPEG", (("quality", 90), ("subsampling", "4:4:4")), ("RGB", "L", "CMYK"),
              exif=True, icc=True, dpi=True, lossy=True),
    Container("jpeg-progressive", "JPEG", (("quality", 85), ("subsampling", "4:2:0"), ("progressive", True)),
              ("RGB", "L", "CMYK"), exif=True, icc=True, dpi=True, lossy=True),
    Container("jpeg-progressive-444", "JPEG", (("quality", 85), ("subsampling", "4:4:4"), ("progressive", True)),
              ("RGB", "L"), exif=True, icc=True, dpi=True, lossy=True),
    # GIF stores palette images (Pillow would quantize RGB to P: another mode than drawn).
    Container("gif", "GIF", (), ("P",), animated=True, disposals=(0, 1, 2, 3), keys=True),
    Container("webp", "WEBP", (("quality", 80),), ("RGB", "RGBA"), exif=True, icc=True, animated=True, lossy=True,
              drops_opaque_alpha=True),
    Container("webp-lossless", "WEBP", (("lossless", True),), ("RGB", "RGBA"), exif=True, icc=True, animated=True,
              drops_opaque_alpha=True),
    Container("tiff", "TIFF", (), ("RGB", "RGBA", "L", "LA", "1", "CMYK", "I;16", "I;16B", "I", "F", "LAB", "YCbCr"),
              icc=True, dpi=True),
    Container("bmp", "BMP", (), ("RGB", "L", "P", "1"), dpi=True),
)}
CONTAINER_NAMES = tuple(CONTAINERS)
JPEG_CONTAINERS = tuple(n for n, c in CONTAINERS.items() if c.format == "JPEG")

# What a drawn image is: as today (an image built in memory), a file, a photo with an EXIF
# orientation, or an animation. The in-memory image is listed first (the simplest; hypothesis
# shrinks towards it) and takes half the draws.
REQUEST_KINDS = ("memory", "memory", "memory", "file", "exif", "animation")


# Alpha patterns whose top-left pixel is transparent: libwebp keeps the alpha of such images (it
# drops an alpha that is all 255, and measured, also that of some small animated checkerboards).
WEBP_ALPHA_PATTERNS = ("transparent", "gradient")


def _stores(c: Container, mode: str, alpha: str) -> bool:
    # The file must give back the drawn mode and transparency: a key only where keys are stored,
    # a palette's per-entry alpha only in PNG (GIF keeps one transparent index).
    if mode not in c.modes:
        return False
    if c.drops_opaque_alpha and mode == "RGBA" and alpha not in WEBP_ALPHA_PATTERNS:
        return False
    if alpha == "key" and not c.keys:
        return False
    return not (mode == "P" and alpha not in ("", "opaque", "key") and c.format != "PNG")


def containers_for(mode: str, *, alpha: str = "", exif: bool = False, animated: bool = False, icc: bool = False,
                   dpi: bool = False) -> tuple[str, ...]:
    """The containers Pillow opens an image of `mode` (and alpha pattern) from in that same mode,
    and that can carry the metadata asked for."""
    out = []
    for c in CONTAINERS.values():
        if not _stores(c, mode, alpha) or (exif and not c.exif) or (icc and not c.icc) or (dpi and not c.dpi):
            continue
        if animated and not (c.animated and mode in c.animated_modes):
            continue
        out.append(c.name)
    return tuple(out)


def check_request(mode: str, container: str, orientation: int, icc: str, frames: int, disposal: int,
                  dpi: int, alpha: str = "") -> None:
    """ValueError unless the metadata is expressible: a container that stores the mode and
    carries each piece of metadata asked for (none asked for without a container)."""
    if not container:
        if orientation or icc or frames != 1 or disposal or dpi:
            raise ValueError("EXIF orientation, ICC profile, frames, disposal and DPI need a container "
                             f"(one of {', '.join(CONTAINER_NAMES)})")
        return
    c = CONTAINERS.get(container)
    if c is None:
        raise ValueError(f"unknown container {container!r}; expected one of {', '.join(CONTAINER_NAMES)}")
    if not _stores(c, mode, alpha):
        raise ValueError(f"container {container!r} is not drawn for mode {mode!r} ({alpha or 'any alpha'}): Pillow "
                         f"would open it in another mode; modes: {', '.join(c.modes)}")
    if orientation and (not c.exif or orientation not in ORIENTATIONS):
        raise ValueError(f"EXIF orientation {orientation!r} in {container!r}: expected 1..8 in a container with EXIF")
    if icc and (not c.icc or icc not in ICC_PROFILES):
        raise ValueError(f"ICC profile {icc!r} in {container!r}: expected one of {ICC_PROFILES} in a container with ICC")
    if frames < 1 or (frames > 1 and not (c.animated and mode in c.animated_modes)) or frames > 8:
        raise ValueError(f"{frames} frames in {container!r} for mode {mode!r}: 2..8 frames, in "
                         + ", ".join(f"{n} ({'/'.join(x.animated_modes)})" for n, x in CONTAINERS.items() if x.animated))
    if disposal and (frames == 1 or disposal not in c.disposals):
        raise ValueError(f"disposal {disposal!r} in {container!r}: expected one of {c.disposals} in an animation")
    if dpi and (not c.dpi or dpi < 0):
        raise ValueError(f"DPI {dpi!r} in {container!r}: expected a positive value in a container with DPI")


# The ICC header's creation date (bytes 24-35: year, month, day, hour, minute, second as big-endian
# uint16): littlecms writes the current time there, so the same drawn case gave other file bytes
# a second later. A fixed date makes a drawn request reproducible byte for byte. The profile ID
# (bytes 84-99) is left unset (zeros) by littlecms, so nothing else covers these bytes.
ICC_DATE = (2026, 1, 1, 0, 0, 0)


@functools.lru_cache(maxsize=4)
def icc_profile(name: str) -> bytes:
    """The bytes of a named ICC profile (littlecms' built-in sRGB, dated `ICC_DATE`)."""
    from PIL import ImageCms

    if name != "srgb":
        raise ValueError(f"unknown ICC profile {name!r}")
    data = bytearray(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
    data[24:36] = b"".join(v.to_bytes(2, "big") for v in ICC_DATE)
    return bytes(data)


@functools.lru_cache(maxsize=16)
def exif_bytes(orientation: int) -> bytes:
    """An EXIF block holding only the Orientation tag."""
    exif = Image.Exif()
    exif[ORIENTATION_TAG] = int(orientation)
    return exif.tobytes()


def _canvas(frame: Image.Image, size: tuple[int, int]) -> Image.Image:
    if frame.size == size:
        return frame
    base = Image.new(frame.mode, size)
    if frame.mode == "P":
        base.putpalette(frame.getpalette() or [])
    base.paste(frame, (0, 0))
    return base


def _gif_key(frame: Image.Image) -> Image.Image:
    # GIF holds one transparent index: per-entry alpha becomes the first fully transparent entry
    # (Pillow 13's GIF writer raises on per-entry alpha with disposal 2).
    key = frame.info.get("transparency")
    if not isinstance(key, (bytes, bytearray)):
        return frame
    out = frame.copy()
    out.info = {k: v for k, v in frame.info.items() if k != "transparency"}
    if 0 in key:
        out.info["transparency"] = key.index(0)
    return out


def encode(frames: Sequence[Image.Image], container: str, *, orientation: int = 0, icc: str = "",
           disposal: int = 0, dpi: int = 0) -> bytes:
    """The file bytes of `frames` (the first is the canvas; later ones may be smaller and are
    placed at the top left) in `container` with the metadata given."""
    c = CONTAINERS[container]
    if c.format == "GIF":
        frames = [_gif_key(f) for f in frames]
    first, rest = frames[0], list(frames[1:])
    kwargs: dict[str, Any] = dict(c.options)
    if orientation:
        kwargs["exif"] = exif_bytes(orientation)
    if icc:
        kwargs["icc_profile"] = icc_profile(icc)
    if dpi:
        kwargs["dpi"] = (dpi, dpi)
    if rest:
        if c.format == "WEBP":  # WebP frames all have the canvas size
            rest = [_canvas(f, first.size) for f in rest]
        kwargs.update(save_all=True, append_images=rest, duration=40, loop=0)
        if c.format in ("GIF", "PNG"):
            kwargs["disposal"] = disposal
    key = first.info.get("transparency")
    if key is not None and not rest and (c.format == "PNG" or (c.format == "GIF" and isinstance(key, int))):
        kwargs["transparency"] = key
    buf = io.BytesIO()
    with warnings.catch_warnings(), _encoder_room(first):
        warnings.simplefilter("ignore")
        first.save(buf, c.format, **kwargs)
    return buf.getvalue()


@contextlib.contextmanager
def _encoder_room(img: Image.Image):
    """Room for the whole compressed image in the encoder's buffer. Pillow 13.0 gives a
    progressive or optimized JPEG a buffer of one byte a pixel below quality 95, and libjpeg then
    fails ("Suspension not allowed here", OSError "broken data stream") on noise at 4:4:4,
    e.g. a 253x202 RGB noise image (measured); ImageFile.MAXBLOCK is the floor of that buffer."""
    before = ImageFile.MAXBLOCK
    ImageFile.MAXBLOCK = max(before, 4 * img.width * img.height + 65536)
    try:
        yield
    finally:
        ImageFile.MAXBLOCK = before


def draw_request(choose: Callable[[Sequence[Any]], Any], mode: str, alpha: str = "") -> dict[str, Any]:
    """Request metadata for an image of `mode` and alpha pattern, as `CaseParams` fields;
    `choose(options)` picks one option (the first is the simplest). `{}` is an image built in
    memory."""
    kind = choose(REQUEST_KINDS)
    if kind == "memory":
        return {}
    options = containers_for(mode, alpha=alpha, exif=kind == "exif", animated=kind == "animation")
    if not options:
        options = containers_for(mode, alpha=alpha)
        kind = "file"
    if not options:
        return {}
    container = choose(options)
    c = CONTAINERS[container]
    out: dict[str, Any] = {"container": container}
    if kind == "exif":
        out["orientation"] = choose(ORIENTATIONS)
    if kind == "animation":
        out["frames"] = choose(FRAME_COUNTS)
        out["disposal"] = choose(c.disposals)
    if c.icc:
        icc = choose(("",) + ICC_PROFILES)
        if icc:
            out["icc"] = icc
    if c.dpi:
        dpi = choose((0,) + ODD_DPIS)
        if dpi:
            out["dpi"] = dpi
    return out


__all__ = [
    "CONTAINERS",
    "CONTAINER_NAMES",
    "Container",
    "FRAME_COUNTS",
    "ICC_PROFILES",
    "JPEG_CONTAINERS",
    "ODD_DPIS",
    "ORIENTATIONS",
    "ORIENTATION_TAG",
    "REQUEST_KINDS",
    "SWAPPING_ORIENTATIONS",
    "check_request",
    "containers_for",
    "draw_request",
    "encode",
    "exif_bytes",
    "icc_profile",
]
