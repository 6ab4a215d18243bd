"""GPU preprocessing: Pillow-exact Triton kernels (`preprocess`) and the serving engine's eager path.

Importing this package never imports triton; a call without a usable backend raises
`kimi_oracle.errors.BackendError`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["preprocess", "eager_preprocess"]


def preprocess(images: Any, config: Any, **kwargs: Any) -> Any:
    """Bit-exact GPU pipeline; see `kimi_oracle.gpu.pipeline.preprocess` for the keywords."""
    from .pipeline import preprocess as _impl

    return _impl(images, config, **kwargs)


def eager_preprocess(images: Any, config: Any, **kwargs: Any) -> Any:
    """The serving engine's torch path (a known-imperfect candidate); see `gpu.eager`."""
    from .eager import preprocess as _impl

    return _impl(images, config, **kwargs)
