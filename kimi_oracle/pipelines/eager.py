"""`eager`: the earlier name of the built-in engine model, kept as an alias.

The model is `kimi_oracle.pipelines.engines.sglang_0_5_23` (SGLang 0.5.23's Kimi-K3 deferred GPU
path, bit-identical on CPU tensors; docs/spec.md, "Engine model: sglang-0.5.23"). The candidate
specs `eager` and `sglang-0.5.23` run the same function.
"""

from __future__ import annotations

from kimi_oracle.pipelines.engines.sglang_0_5_23 import (  # noqa: F401  (the alias's public names)
    ENGINE,
    from_tensors,
    host_tensors,
    preprocess,
)

__all__ = ["ENGINE", "from_tensors", "host_tensors", "preprocess"]
