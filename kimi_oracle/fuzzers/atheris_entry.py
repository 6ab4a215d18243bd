"""Start a harness under atheris, with kimi_oracle and Pillow's Python code instrumented.

Used by `fuzz/*_fuzzer.py` (plain atheris, ClusterFuzzLite) and by the nightly runner
(`python -m kimi_oracle.fuzzers.atheris_entry NAME ...`). atheris is imported here only:
kimi_oracle itself never needs it. `--replay FILE...` replays inputs without atheris.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from typing import Sequence

from kimi_oracle.core import memory
from kimi_oracle.core.errors import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from kimi_oracle.core.files import DEFAULT_MAX_BYTES as MAX_INPUT_BYTES
from kimi_oracle.core.files import read_file
from kimi_oracle.fuzzers import HARNESSES

# The harness module is imported inside the functions below, so that `run` imports it under
# atheris' instrumentation hook (coverage feedback from our code).


def run(name: str, argv: Sequence[str] | None = None) -> None:
    """Fuzz harness `name` (structured or decoder) with libFuzzer arguments from `argv`."""
    try:
        import atheris
    except ImportError:
        sys.stderr.write("atheris is not installed: pip install 'kimi-oracle[fuzz]'\n")
        raise SystemExit(EXIT_ERROR) from None
    # Coverage feedback from Pillow's plugins only. With kimi_oracle instrumented too (even only
    # kimi_oracle.core), the decoder harness's RSS grew by ~7 KB an execution (2 GB in 2.5 min)
    # until libFuzzer killed it; with Pillow alone it stays flat (measured, docs/nightly.md).
    with atheris.instrument_imports(include=["PIL"]):
        from PIL import GifImagePlugin, JpegImagePlugin, PngImagePlugin, TiffImagePlugin, WebPImagePlugin  # noqa: F401

        from kimi_oracle.fuzzers.harnesses import Harness, HarnessSettings
    memory.bound_heap_growth()  # a million inputs of many sizes must not creep up to the RSS limit
    harness = Harness(name, HarnessSettings.from_env())
    atheris.Setup(list(argv if argv is not None else sys.argv), harness.test_one_input)
    atheris.Fuzz()


def replay(name: str, paths: Sequence[str]) -> int:
    """Replay corpus files through harness `name` without atheris; 1 if any is a finding."""
    from kimi_oracle.fuzzers.harnesses import Harness, HarnessSettings, PyFuzzedDataProvider

    settings = HarnessSettings.from_env()
    harness = Harness(name, dataclasses.replace(settings, findings_dir=None))
    worst = EXIT_OK
    for path in paths:
        data = read_file(path, max_bytes=MAX_INPUT_BYTES)  # a regular file, capped (core.files)
        outcome = harness.evaluate(data, PyFuzzedDataProvider(data) if name == "structured" else None)
        detail = outcome.reason if outcome.status == "rejected" else (
            outcome.verdict.message if outcome.verdict is not None else "")
        label = f"{outcome.check}: " if outcome.status == "finding" else ""
        print(f"{path}: {outcome.status} {label}{detail}"[:2000])
        if outcome.status == "finding":
            worst = EXIT_FINDINGS
    return worst


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m kimi_oracle.fuzzers.atheris_entry NAME --replay FILE...`: replay inputs without
    atheris; `... NAME [libFuzzer args]`: fuzz under atheris."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in HARNESSES:
        print(f"usage: python -m kimi_oracle.fuzzers.atheris_entry {{{','.join(HARNESSES)}}} [--replay FILE...] "
              "[libFuzzer args]", file=sys.stderr)
        return EXIT_ERROR
    name = args[0]
    if len(args) > 1 and args[1] == "--replay":
        return replay(name, args[2:])
    # libFuzzer runs its children (-merge=1, -fork) as a shell command starting with argv[0]:
    # this module's own command line, not its file (which is not executable).
    command = f"{shlex.quote(sys.executable)} -m kimi_oracle.fuzzers.atheris_entry {shlex.quote(name)}"
    run(name, [command] + args[1:])
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
