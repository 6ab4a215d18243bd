"""The library's one short import path: the names a library user needs, from their homes.

    from kimi_oracle.api import PreprocessConfig, preprocess

Each name is the object of its home module (no copy, no wrapper): `PreprocessConfig` of
`core.config`, `PreprocessResult` of `core.result`, `plan` of `core.geometry`, the reference
`preprocess` of `pipelines.reference`, `gpu_preprocess` and `eager_preprocess` of
`pipelines.gpu` (importing this module never imports triton), `load_candidate` of
`oracle.candidates`.
"""

from __future__ import annotations

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.candidates import load_candidate
from kimi_oracle.pipelines.gpu import eager_preprocess
from kimi_oracle.pipelines.gpu import preprocess as gpu_preprocess
from kimi_oracle.pipelines.reference import preprocess

__all__ = [
    "PreprocessConfig",
    "PreprocessResult",
    "eager_preprocess",
    "gpu_preprocess",
    "load_candidate",
    "plan",
    "preprocess",
]
