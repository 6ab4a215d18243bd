#!/usr/bin/env python3
"""atheris harness: raw bytes -> images.decode (pixel cap on) -> both pipelines -> oracle.

    python fuzz/decoder_fuzzer.py fuzz/corpus/decoder -dict=fuzz/png_jpeg.dict -max_total_time=60

Undecodable and over-cap inputs are rejected, not findings. Settings come from KIMI_FUZZ_*
variables (see kimi_oracle/harnesses.py). Replay without atheris:
`python -m kimi_oracle.fuzzers.atheris_entry decoder --replay FILE`.
"""

import sys

from kimi_oracle.fuzzers.atheris_entry import run

if __name__ == "__main__":
    run("decoder", sys.argv)
