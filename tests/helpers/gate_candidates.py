"""Candidates for the gate tests: a correct one that is deliberately slow, and two broken ones."""

from kimi_oracle.pipelines import reference


def slow_reference(images, config):
    """The reference, correct, but three times the work on every call: about 3x the reference's
    time on any machine, however fast or busy (a fixed sleep would be a large or a small share
    of a call depending on the machine's speed)."""
    reference.preprocess(images, config)
    reference.preprocess(images, config)
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


def crashes_on_palette(images, config):
    """Correct, but raises on palette ("P") images with sides up to 300 px (the goldens', the fuzzed
    and the invariance batches' ones); the timing stage's one palette image, 1280x720 in
    `batch16-mixed`, is spared, so how many timing inputs a fast machine reaches changes nothing."""
    if any(img.mode == "P" and max(img.size) <= 300 for img in images):
        raise ValueError("planted: cannot handle palette images")
    return reference.preprocess(images, config)


def eager_batch_nudged(images, config):
    """The engine model (`eager`), plus one value moved by 0.05 (a few levels) in batches of two
    images or more under merge size 1: a new bug that only shows on inputs where `eager` already
    fails, and rarely on the simplest failing input of a group."""
    from kimi_oracle.pipelines import eager

    out = eager.preprocess(images, config)
    if len(images) >= 2 and config.merge_kernel_size == 1:
        out.pixel_values[0, 0, 0, 0] += 0.05
    return out


# Issue 34 item 3: the pixel count above which `wrong_on_photos` is wrong (a 2560x1680 frame is
# 4.3 Mpx; phone photos and 4K frames are above it, every fuzzed and golden image far below).
PHOTO_PIXELS = 4_300_000


def wrong_on_photos(images, config):
    """The reference, exact everywhere except on batches with an image over 4.3 Mpx, where every
    value is 0.25 higher (about 16 levels)."""
    out = reference.preprocess(images, config)
    if any(img.size[0] * img.size[1] > PHOTO_PIXELS for img in images):
        out.pixel_values = out.pixel_values + 0.25
    return out
