"""GPU preprocessing: Pillow-exact Triton kernels (`preprocess`) and the serving engine's eager path.

Importing this package never imports triton; a call without a usable backend raises
`kimi_oracle.core.errors.BackendError`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["preprocess", "eager_preprocess"]


def preprocess(images: Any, config: Any, **kwargs: Any) -> Any:
    """Bit-exact GPU pipeline; see `kimi_oracle.pipelines.gpu.pipeline.preprocess` for the keywords."""
    from kimi_oracle.pipelines.gpu.pipeline import preprocess as _impl

    return _impl(images, config, **kwargs)


def eager_preprocess(images: Any, config: Any, **kwargs: Any) -> Any:
    """The serving engine's torch path (a known-imperfect candidate); see `gpu.eager`."""
    from kimi_oracle.pipelines.eager import preprocess as _impl

    return _impl(images, config, **kwargs)
