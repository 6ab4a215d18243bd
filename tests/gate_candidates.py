"""Candidates for the gate tests: a correct one that is deliberately slow."""

import time

from kimi_oracle.pipelines import reference


def slow_reference(images, config):
    """The reference, correct, but 40 ms slower on every call."""
    time.sleep(0.04)
    return reference.preprocess(images, config)


def nudged_reference(images, config):
    """The reference with every value moved by one float32 ulp: wrong bitwise, right within a level."""
    import torch

    out = reference.preprocess(images, config)
    out.pixel_values = torch.nextafter(out.pixel_values, torch.full_like(out.pixel_values, 10.0))
    return out


def crashes_on_large(images, config):
    """Correct on small images, raises on any side over 300 px (the benchmark inputs)."""
    if any(max(img.size) > 300 for img in images):
        raise ValueError("planted: cannot handle large images")
    return reference.preprocess(images, config)
