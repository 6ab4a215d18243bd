"""How a candidate takes its images: decoded PIL images, or the encoded bytes of each file.

A candidate function declares what it accepts with an attribute (docs/inputs.md):

    def preprocess(images, config): ...          # PIL images (the default)
    preprocess.kimi_oracle_input = "bytes"        # only bytes: it decodes for itself
    preprocess.kimi_oracle_input = ("pil", "bytes")  # either, per image

The form a run uses (`--input-form`) is "pil", "bytes" or "both" (each image in one of the two
forms, chosen from the image alone, so that an image takes the same form in every batch).
The reference always decodes with Pillow: an image opened from a file is the file as Pillow
opens it, and a bytes-taking candidate gets those very bytes (an in-memory image: a lossless
PNG or TIFF of it, which Pillow opens to the same image).
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

from PIL import Image

from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.images import as_bytes, call_copy, encoded_bytes

INPUT_FORMS = ("pil", "bytes")
INPUT_FORM_CHOICES = ("pil", "bytes", "both")
ATTRIBUTE = "kimi_oracle_input"


def accepted_forms(func: Any) -> tuple[str, ...]:
    """The input forms `func` declares (its `kimi_oracle_input`), ("pil",) when none."""
    declared = getattr(func, ATTRIBUTE, "pil")
    if isinstance(declared, str):
        forms: tuple = (declared,)
    elif isinstance(declared, (tuple, list)):
        forms = tuple(declared)
    else:
        forms = ()
    if not forms or any(f not in INPUT_FORMS for f in forms):
        raise CandidateError(f"{ATTRIBUTE} = {declared!r}: expected 'pil', 'bytes' or ('pil', 'bytes')")
    return forms


def resolve_form(accepts: Sequence[str], form: str | None, spec: str = "candidate") -> str:
    """The form a run uses: `form`, or by default "both" when the candidate accepts both, else
    the one it accepts; CandidateError when it does not accept the form asked for."""
    if form is None:
        form = "both" if len(set(accepts)) > 1 else accepts[0]
    if form not in INPUT_FORM_CHOICES:
        raise CandidateError(f"input form {form!r}: expected one of {', '.join(INPUT_FORM_CHOICES)}")
    needed = INPUT_FORMS if form == "both" else (form,)
    missing = [f for f in needed if f not in accepts]
    if missing:
        raise CandidateError(f"candidate {spec!r} does not take {' or '.join(missing)} inputs (it declares "
                             f"{', '.join(accepts)}; a function declares bytes with {ATTRIBUTE} = 'bytes')")
    return form


def image_form(img: Image.Image, form: str) -> str:
    """The form `img` is handed in under the run's `form` ("both": decided by the image alone)."""
    if form != "both":
        return form
    data = encoded_bytes(img)
    key = (data[-64:] + len(data).to_bytes(8, "little")) if data is not None else f"{img.size}{img.mode}".encode()
    return "bytes" if hashlib.sha1(key).digest()[0] & 1 else "pil"


def hand_over(images: Sequence[Image.Image], form: str) -> list[Any]:
    """What the candidate receives for `images`: copies it may alter (an image opened from a file
    is opened again from its bytes: frames, EXIF, ICC as Pillow gives them), or the bytes."""
    return [as_bytes(img) if image_form(img, form) == "bytes" else call_copy(img) for img in images]


__all__ = ["ATTRIBUTE", "INPUT_FORMS", "INPUT_FORM_CHOICES", "accepted_forms", "hand_over", "image_form",
           "resolve_form"]
