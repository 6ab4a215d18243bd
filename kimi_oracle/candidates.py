"""Public import path kept stable: `kimi_oracle.candidates` is `kimi_oracle.oracle.candidates` (the same module object)."""

import sys

from kimi_oracle.oracle import candidates as _module

sys.modules[__name__] = _module
