"""Public import path kept stable: `kimi_oracle.gpu.preprocess` and `eager_preprocess`.

The GPU pipeline lives in `kimi_oracle.pipelines.gpu`, the engine model in
`kimi_oracle.pipelines.eager`. Importing this module never imports triton.
"""

from kimi_oracle.pipelines.gpu import eager_preprocess, preprocess

__all__ = ["preprocess", "eager_preprocess"]
