"""Public import path kept stable: `kimi_oracle.reference` is `kimi_oracle.pipelines.reference` (the same module object)."""

import sys

from kimi_oracle.pipelines import reference as _module

sys.modules[__name__] = _module
