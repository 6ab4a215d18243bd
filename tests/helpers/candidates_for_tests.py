"""Planted-failure candidates for the nightly tests, and the reference on one thread for the
engine benchmark (loaded as `path/to/file.py:function`)."""

import os
import time

import torch

from kimi_oracle.pipelines import reference


def aborting(images, config):
    """Kills its own process (SIGABRT) whenever an image's width is a multiple of 7."""
    if any(img.width % 7 == 0 for img in images):
        os.abort()
    return reference.preprocess(images, config)


def hanging(images, config):
    """Never returns for images wider than 20 pixels."""
    if any(img.width > 20 for img in images):
        while True:
            time.sleep(0.05)
    return reference.preprocess(images, config)


def drops_last_row(images, config):
    """Forgets the last patch row of the batch: the grids then advertise more rows than exist."""
    out = reference.preprocess(images, config)
    return out.pixel_values[:-1], out.grid_thws


def bumps_palette(images, config):
    """Palette images come out one level brighter somewhere: a pixel mismatch on P inputs."""
    out = reference.preprocess(images, config)
    if any(img.mode == "P" for img in images):
        pv = out.pixel_values.clone()
        pv[0, 0, 0, 0] = pv[0, 0, 0, 0] + 2.0 / 255.0 / 0.5
        return pv, out.grid_thws
    return out


def wrong_dtype(images, config):
    """float64 output: a shape/dtype finding."""
    out = reference.preprocess(images, config)
    return out.pixel_values.to(torch.float64), out.grid_thws


def tells_its_output_pool(images, config):
    """Raises with whether its process keeps the reference's output slabs (pipelines/outputs)."""
    from kimi_oracle.pipelines import outputs

    raise RuntimeError(f"output pool enabled: {outputs._ENABLED}")


def reference_one_thread(images, config):
    """The reference on one thread (the engines' CPU paths are timed on one thread too)."""
    return reference.preprocess(images, config, threads=1)
