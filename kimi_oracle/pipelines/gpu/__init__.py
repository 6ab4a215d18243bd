"""GPU preprocessing: Pillow-exact Triton kernels (`preprocess`) and the serving engine's eager path.

Importing this package never imports triton; a call without a usable backend raises
`kimi_oracle.core.errors.BackendError`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["preprocess", "preprocess_drawn_tiles", "eager_preprocess"]


def preprocess(images: Any, config: Any, **kwargs: Any) -> Any:
    """Bit-exact GPU pipeline; see `kimi_oracle.pipelines.gpu.pipeline.preprocess` for the keywords."""
    from kimi_oracle.pipelines.gpu.pipeline import preprocess as _impl

    return _impl(images, config, **kwargs)


def preprocess_drawn_tiles(images: Any, config: Any, **kwargs: Any) -> Any:
    """The `gpu` fuzz candidate: under the interpreter, tile sizes drawn from the batch
    (`pipeline.drawn_tiles`) so that small fuzzed images cross tile boundaries; on CUDA the
    default tiles, the ones `kimi-oracle gpu build` certifies (real images cross them)."""
    from kimi_oracle.core.images import load_images
    from kimi_oracle.pipelines.gpu.pipeline import drawn_tiles
    from kimi_oracle.pipelines.gpu.pipeline import preprocess as _impl
    from kimi_oracle.pipelines.gpu.pipeline import resolve_device

    if "tiles" not in kwargs and resolve_device(kwargs.get("device")).type == "cpu":
        images = load_images(images)
        kwargs["tiles"] = drawn_tiles(images, config)
    return _impl(images, config, **kwargs)


def eager_preprocess(images: Any, config: Any, **kwargs: Any) -> Any:
    """The serving engine's torch path (a known-imperfect candidate); see `gpu.eager`."""
    from kimi_oracle.pipelines.eager import preprocess as _impl

    return _impl(images, config, **kwargs)
