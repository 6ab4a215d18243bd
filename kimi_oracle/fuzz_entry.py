"""Start a harness under atheris, with kimi_oracle and Pillow's Python code instrumented.

Used by `fuzz/*_fuzzer.py` (plain atheris, ClusterFuzzLite) and by the nightly runner
(`python -m kimi_oracle.harnesses NAME ...`). atheris is imported here only: kimi_oracle
itself never needs it.
"""

from __future__ import annotations

import sys
from typing import Sequence


def run(name: str, argv: Sequence[str] | None = None) -> None:
    """Fuzz harness `name` (structured or decoder) with libFuzzer arguments from `argv`."""
    try:
        import atheris
    except ImportError:
        sys.stderr.write("atheris is not installed: pip install 'kimi-oracle[fuzz]'\n")
        raise SystemExit(2) from None
    # Coverage feedback from our code and Pillow's plugins; torch/numpy stay uninstrumented.
    with atheris.instrument_imports(include=["kimi_oracle", "PIL"], exclude=["kimi_oracle.fuzz_entry"]):
        from kimi_oracle import config, geometry, images, reference  # noqa: F401
        from kimi_oracle import harnesses, oracle, generators  # noqa: F401
        from PIL import GifImagePlugin, JpegImagePlugin, PngImagePlugin, TiffImagePlugin, WebPImagePlugin  # noqa: F401
    harness = harnesses.Harness(name, harnesses.HarnessSettings.from_env())
    atheris.Setup(list(argv if argv is not None else sys.argv), harness.test_one_input)
    atheris.Fuzz()
