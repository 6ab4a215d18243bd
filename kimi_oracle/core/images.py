"""Input rules shared by every pipeline: decoding with a pixel cap, and Pillow's mode classes."""

from __future__ import annotations

import base64
import functools
import binascii
import io
import json
import os
import threading
import warnings
from typing import Any, Iterable, Literal, Sequence

import numpy as np
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.files import DEFAULT_MAX_BYTES, read_file  # noqa: F401 - the one reader of user files
from kimi_oracle.core.geometry import plan

ResampleKind = Literal["none", "nearest", "premultiplied", "bicubic"]

# Modes Pillow's resize forces to NEAREST whatever filter is asked for.
NEAREST_MODES = frozenset({"1", "P"})
# Modes Pillow resizes through a premultiplied intermediate ("RGBA" -> "RGBa", "LA" -> "La").
PREMULTIPLIED_MODES = {"RGBA": "RGBa", "LA": "La"}
# Families of Pillow's separate resampling paths, for the pipelines that reimplement them.
MODES_16BIT = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})
MODES_32BIT = frozenset({"I", "F"})
# The EXIF Orientation tag: the requests write it (inputs.requests), the diagnosis reads it.
ORIENTATION_TAG = 0x0112

ImageSource = Any  # PIL image, path, bytes, data: URL, uint8 array or tensor

# (DEFAULT_MAX_BYTES, the largest file read as an image, is core.files': the one reader.)

_PIL_LIMIT_LOCK = threading.Lock()


def default_max_pixels() -> int:
    """Pillow's own refusal threshold: DecompressionBombError above 2 × MAX_IMAGE_PIXELS."""
    # Under the lock: `_open_bytes` sets Pillow's limit to None while it opens a file.
    with _PIL_LIMIT_LOCK:
        limit = Image.MAX_IMAGE_PIXELS
    return 2 * int(limit) if limit else 0


@functools.lru_cache(maxsize=4)
def _lab_transform(mode: str) -> Any:
    from PIL import ImageCms

    return ImageCms.buildTransform(ImageCms.createProfile("LAB"), ImageCms.createProfile("sRGB"), "LAB", mode)


def convert(img: Image.Image, mode: str) -> Image.Image:
    """`img.convert(mode)`, the same bytes, faster for LAB: Pillow's own LAB -> RGB/RGBA conversion
    builds an ImageCms transform on every call (docs/measurements.md); one built once is applied
    instead. The reference and the engine models convert through this."""
    if img.mode == "LAB" and mode in ("RGB", "RGBA"):
        return _lab_transform(mode).apply(img)
    return img.convert(mode)


def has_alpha(img: Image.Image) -> bool:
    """The checkpoint's alpha rule: an "A" band, or a "transparency" entry in `img.info`."""
    return "A" in img.getbands() or "transparency" in img.info


def alpha_class(img: Image.Image) -> str:
    """A short name of how the image's transparency is expressed (for reports)."""
    if "A" in img.getbands():
        return "alpha band"
    if "transparency" in img.info:
        return "transparency key"
    return "opaque"


def resample_kind(mode: str, src_size: tuple[int, int], dst_size: tuple[int, int]) -> ResampleKind:
    """Which of Pillow's resize paths `Image.resize(dst_size, BICUBIC)` takes for this mode."""
    if tuple(src_size) == tuple(dst_size):
        return "none"  # Pillow returns a copy
    if mode in NEAREST_MODES:
        return "nearest"
    if mode in PREMULTIPLIED_MODES:
        return "premultiplied"
    return "bicubic"


def _check_size(img: Image.Image, max_pixels: int, name: str) -> None:
    w, h = img.size
    if w <= 0 or h <= 0:
        raise InputError(f"image has an empty size {w}x{h}", source=name)
    if max_pixels and w * h > max_pixels:
        raise InputError(
            f"image of {w}x{h} = {w * h} pixels exceeds the pixel cap of {max_pixels}",
            source=name,
        )


def _open_bytes(data: bytes, name: str, max_pixels: int) -> Image.Image:
    if not data:
        raise InputError("empty input (0 bytes)", source=name)
    with _PIL_LIMIT_LOCK, warnings.catch_warnings():
        # Pillow's own bomb check stays on while it parses the file, set from our cap: it refuses
        # an image (or a GIF/APNG frame) above 2 × MAX_IMAGE_PIXELS before allocating it, so a
        # tiny file announcing a huge frame costs nothing. Its warning band is ours to judge.
        warnings.simplefilter("ignore")
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = (max_pixels + 1) // 2 if max_pixels else None
        try:
            img = Image.open(io.BytesIO(data))
            _check_size(img, max_pixels, name)
            img.load()
            attach_encoded(img, data)
        except Image.DecompressionBombError as exc:
            raise InputError(f"exceeds the pixel cap of {max_pixels} ({_reason(exc)})", source=name) from None
        except Image.UnidentifiedImageError:
            raise InputError("cannot decode: not an image format Pillow recognises", source=name) from None
        except InputError:
            raise
        except Exception as exc:  # Pillow raises many types on corrupt headers
            raise InputError(f"cannot decode: {_reason(exc)}", source=name) from None
        finally:
            Image.MAX_IMAGE_PIXELS = saved
    _check_size(img, max_pixels, name)
    return img


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not text.startswith(type(exc).__name__) else text


def _from_array(arr: Any, name: str) -> Image.Image:
    try:
        import torch

        if isinstance(arr, torch.Tensor):
            arr = arr.detach().cpu().numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    arr = np.asarray(arr)
    if arr.dtype != np.uint8:
        raise InputError(f"arrays must be uint8, got {arr.dtype}", source=name)
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim == 2:
        mode = "L"
    elif arr.ndim == 3 and arr.shape[2] in (3, 4):
        mode = "RGB" if arr.shape[2] == 3 else "RGBA"
    else:
        raise InputError(
            f"arrays must be HxW or HxWxC with C in 1, 3, 4; got shape {tuple(arr.shape)}",
            source=name,
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InputError(f"array has an empty size {tuple(arr.shape)}", source=name)
    return Image.fromarray(np.ascontiguousarray(arr), mode=mode)


def decode(source: ImageSource, *, max_pixels: int | None = None, name: str | None = None) -> Image.Image:
    """Turn one input into a loaded PIL image, or raise InputError naming the file and reason."""
    cap = default_max_pixels() if max_pixels is None else int(max_pixels)
    if isinstance(source, Image.Image):
        label = name or "<PIL image>"
        _check_size(source, cap, label)
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _open_bytes(bytes(source), name or "<bytes>", cap)
    if isinstance(source, str) and source.startswith("data:"):
        label = name or "<data URL>"
        header, sep, payload = source.partition(",")
        if not sep:
            raise InputError("malformed data URL (no comma)", source=label)
        try:
            if header.endswith(";base64"):
                data = base64.b64decode(payload, validate=True)
            else:
                from urllib.parse import unquote_to_bytes

                data = unquote_to_bytes(payload)
        except (binascii.Error, ValueError) as exc:
            raise InputError(f"malformed base64 in data URL: {exc}", source=label) from None
        return _open_bytes(data, label, cap)
    if isinstance(source, (str, os.PathLike)):
        label = name or str(source)
        return _open_bytes(read_file(source, name=label), label, cap)
    if hasattr(source, "__array__") or hasattr(source, "shape"):
        img = _from_array(source, name or "<array>")
        _check_size(img, cap, name or "<array>")
        return img
    raise InputError(f"unsupported input type {type(source).__name__}", source=name)


def load_images(images: Iterable[ImageSource] | ImageSource, max_pixels: int | None = None) -> list[Image.Image]:
    """Decode a list of inputs (a single non-list input is accepted as a list of one)."""
    if isinstance(images, (Image.Image, str, bytes, bytearray, os.PathLike)) or hasattr(images, "shape"):
        images = [images]
    items: Sequence[ImageSource] = list(images)
    if not items:
        raise InputError("no images given")
    out = []
    for index, item in enumerate(items):
        label = None if isinstance(item, (str, os.PathLike)) else f"image[{index}]"
        out.append(decode(item, max_pixels=max_pixels, name=label))
    return out


def resize_class(img: Image.Image, config: PreprocessConfig) -> str:
    """How the reference resizes `img` under `config` (`resample_kind` of its plan), or
    `unplanned` when there is no plan; part of finding signatures and executor behaviours."""
    try:
        p = plan(img.width, img.height, config)
        return resample_kind(img.mode, img.size, (p.new_w, p.new_h))
    except Exception:
        return "unplanned"


# ---------------------------------------------------------------------------------------------
# encoded images: the file bytes an image was opened from travel with it

# Modes PNG stores losslessly (transparency included); every other mode goes to TIFF.
PNG_MODES = ("RGB", "RGBA", "LA", "L", "P", "1", "I;16")
_ENCODED = "_kimi_oracle_encoded"


def attach_encoded(img: Image.Image, data: bytes) -> Image.Image:
    """Record on `img` the file bytes it was opened from (`encoded_bytes`); returns `img`."""
    setattr(img, _ENCODED, bytes(data))
    return img


def encoded_bytes(img: Image.Image) -> bytes | None:
    """The file bytes `img` was opened from (by `decode`, `open_encoded` or a generator), or None
    for an image built in memory. `img.copy()` does not carry them."""
    data = getattr(img, _ENCODED, None)
    return data if isinstance(data, bytes) else None


def open_encoded(data: bytes, *, max_pixels: int | None = None, name: str | None = None) -> Image.Image:
    """The image Pillow opens from the file bytes `data` (frame 0 loaded, the file kept open for
    its other frames, `info` and `getexif()` as Pillow reads them), under the pixel cap."""
    cap = default_max_pixels() if max_pixels is None else int(max_pixels)
    return _open_bytes(bytes(data), name or "<bytes>", cap)


def lossless_bytes(img: Image.Image) -> bytes:
    """A file holding exactly `img` (mode, pixels, palette, transparency): PNG for the modes PNG
    stores, TIFF for the others."""
    buf = io.BytesIO()
    fmt = "PNG" if img.mode in PNG_MODES else "TIFF"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            img.save(buf, fmt)
    except (ValueError, OSError, KeyError) as exc:
        raise InputError(f"mode {img.mode!r}: cannot be stored as {fmt}: {exc}") from None
    return buf.getvalue()


def as_bytes(img: Image.Image) -> bytes:
    """The encoded form of `img` a bytes-taking candidate receives: the file it was opened from,
    else `lossless_bytes(img)` (which Pillow opens to the same image)."""
    data = encoded_bytes(img)
    return data if data is not None else lossless_bytes(img)


def call_copy(img: Image.Image) -> Image.Image:
    """A copy of `img` a candidate may alter: an image opened from file bytes is opened again
    from them (frames, EXIF, ICC and file state as Pillow gives them); an in-memory image is
    copied with its `info`."""
    data = encoded_bytes(img)
    if data is not None:
        return open_encoded(data, max_pixels=0)
    out = img.copy()
    out.info = dict(img.info)
    return out


# ---------------------------------------------------------------------------------------------
# the raw image container: everything the checkpoint's behaviour depends on, in one byte string

RAW_MAGIC = b"KIMIRAW1"


def _info_to_json(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).hex()}
    if isinstance(value, tuple):
        return {"tuple": [_info_to_json(v) for v in value]}
    return value


def _info_from_json(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"bytes"}:
        return bytes.fromhex(value["bytes"])
    if isinstance(value, dict) and set(value) == {"tuple"}:
        return tuple(_info_from_json(v) for v in value["tuple"])
    return value


def pack_raw(img: Image.Image) -> bytes:
    """Mode, size, pixels, palette and the scalar `info` entries (transparency among them) of
    `img` as one byte string; `unpack_raw` rebuilds an image the checkpoint treats identically.
    Used for the last-resort input file of a finding and for sending images to a sandbox. An
    image opened from file bytes is packed as those bytes (`unpack_raw` opens them again)."""
    data = encoded_bytes(img)
    if data is not None:
        head = json.dumps({"encoded": True, "mode": img.mode, "size": list(img.size)}).encode()
        return RAW_MAGIC + len(head).to_bytes(4, "little") + head + data
    header: dict[str, Any] = {"mode": img.mode, "size": list(img.size)}
    if img.mode in ("P", "PA") and img.palette is not None:
        raw_mode = img.palette.mode if img.palette.mode in ("RGB", "RGBA") else "RGB"
        header["palette"] = [raw_mode, bytes(img.getpalette(rawmode=raw_mode) or b"").hex()]
    header["info"] = {str(k): _info_to_json(v) for k, v in img.info.items()
                      if isinstance(v, (int, float, str, bytes, bytearray, tuple, bool, type(None)))}
    head = json.dumps(header).encode()
    return RAW_MAGIC + len(head).to_bytes(4, "little") + head + img.tobytes()


def unpack_raw(data: bytes, *, max_pixels: int | None = None) -> Image.Image:
    """The image `pack_raw` packed; `InputError` if `data` is not such a container or its size is
    over the pixel cap (checked before anything is allocated)."""
    if not data.startswith(RAW_MAGIC) or len(data) < 12:
        raise InputError("not a kimi-oracle raw image container")
    n = int.from_bytes(data[8:12], "little")
    cap = default_max_pixels() if max_pixels is None else int(max_pixels)
    try:
        header = json.loads(data[12 : 12 + n])
        w, h = (int(v) for v in header["size"])
        if w <= 0 or h <= 0 or (cap and w * h > cap):
            raise InputError(f"raw image container of {w}x{h} pixels: empty or over the pixel cap of {cap}")
        if header.get("encoded") is True:
            return open_encoded(data[12 + n :], max_pixels=cap, name="<raw image container>")
        img = Image.frombytes(header["mode"], (w, h), data[12 + n :])
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"damaged raw image container: {exc}") from None
    if "palette" in header:
        raw_mode, palette = header["palette"]
        img.putpalette(bytes.fromhex(palette), rawmode=raw_mode)
    img.info = {k: _info_from_json(v) for k, v in (header.get("info") or {}).items()}
    return img
