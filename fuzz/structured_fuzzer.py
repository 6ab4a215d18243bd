#!/usr/bin/env python3
"""atheris harness: FuzzedDataProvider -> inputs.draw (config + CaseParams) -> generators -> candidate vs reference.

    python fuzz/structured_fuzzer.py fuzz/corpus/structured -max_total_time=60

Settings come from KIMI_FUZZ_* variables (see kimi_oracle/fuzzers/harnesses.py); by default the
candidate is `reference` under the k3 profile and a finding raises (libFuzzer saves the input).
Replay an input without atheris: `python -m kimi_oracle.fuzzers.atheris_entry structured --replay FILE`.
"""

import sys

from kimi_oracle.fuzzers.atheris_entry import run

if __name__ == "__main__":
    run("structured", sys.argv)
