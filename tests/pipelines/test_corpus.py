"""Real files nobody here made (a copy of Pillow's test images, see tests/data/corpus/NOTICE)."""

import warnings
from pathlib import Path

import pytest
import torch
from checkpoint_model import spec_preprocess
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.pipelines import reference

CORPUS = Path(__file__).parent.parent / "data" / "corpus"
DECODABLE = sorted((CORPUS / "decodable").iterdir())
UNDECODABLE = sorted((CORPUS / "undecodable").iterdir())


def pillow_opens(path: Path):
    """What the checkpoint gets: Pillow's own open + load, with its own bomb limit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        img = Image.open(path)
        img.load()
    return img


def test_corpus_is_varied():
    modes = set()
    for path in DECODABLE:
        try:
            img = pillow_opens(path)
        except Exception:
            continue
        modes.add(img.mode + ("+t" if "transparency" in img.info else ""))
    assert {"1", "L", "LA", "P", "P+t", "RGB", "RGBA", "CMYK", "I;16", "I;16B", "I", "F", "LAB", "PA"} <= modes
    assert len(UNDECODABLE) >= 15


@pytest.mark.parametrize("path", DECODABLE, ids=lambda p: p.name)
@pytest.mark.parametrize("profile", ["k3", "k25", "k3-small"])
def test_decodable_file_processed_like_checkpoint(path, profile):
    cfg = PreprocessConfig.profile(profile)
    try:
        img = pillow_opens(path)
        want = spec_preprocess([img], cfg.to_hf_json())
    except Exception as exc:  # the checkpoint itself fails on this file
        with pytest.raises(InputError):
            reference.preprocess([path], cfg)
        return
    got = reference.preprocess([path], cfg)
    assert got.grid_thws.tolist() == want[1].tolist()
    assert got.pixel_values.numpy().tobytes() == want[0].tobytes()


@pytest.mark.parametrize("path", UNDECODABLE, ids=lambda p: p.name)
def test_undecodable_file_raises_input_error_with_name(path):
    with pytest.raises(InputError) as info:
        reference.preprocess([path], PreprocessConfig.k3())
    assert path.name in str(info.value)
    # Independent evidence that the file is bad: Pillow itself refuses it.
    with pytest.raises(Exception):
        pillow_opens(path)
