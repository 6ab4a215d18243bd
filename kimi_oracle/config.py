"""Public import path kept stable: `kimi_oracle.config` is `kimi_oracle.core.config` (the same module object)."""

import sys

from kimi_oracle.core import config as _module

sys.modules[__name__] = _module
