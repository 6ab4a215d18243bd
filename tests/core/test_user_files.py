"""Every file we read from a user goes through one reader (core.files): regular files only, a
byte cap, nesting and numbers checked with an error naming the key. A link to /dev/zero or a FIFO
as `--known` is exit 2 at once (it grew the process to 23 GB, or blocked forever)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError, ConfigError, InputError
from kimi_oracle.core import files
from kimi_oracle.core.files import load_json, read_file
from kimi_oracle.oracle.candidates import load_candidate
from kimi_oracle.workflows.known import KnownFileError, read_known

REPO = Path(__file__).resolve().parents[2]
# A bound on a broken run (the FIFO blocked forever), never a condition of the test.
PATIENCE_S = 60
ADDRESS_SPACE = 3 << 30  # the process may not grow past this (it grew to 23 GB)


def _hostile_paths(tmp_path: Path) -> dict[str, Path]:
    zero = tmp_path / "zero.toml"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    return {"dev-zero": zero, "fifo": fifo}


@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_known_naming_dev_zero_or_a_fifo_is_exit_2_unread(tmp_path, kind):
    path = _hostile_paths(tmp_path)[kind]

    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "kimi_oracle", "gate", "--candidate", "reference", "--known",
                           str(path), "--out", str(tmp_path / "g")], capture_output=True, text=True,
                          preexec_fn=bounded, timeout=PATIENCE_S, env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "not a regular file" in proc.stderr and path.name in proc.stderr


def _refused(path: Path, call, expected: type[Exception]) -> None:
    """`call(path)` raises `expected` saying the file is not a regular one. Run in a thread under an
    address-space bound, so that a broken reader neither eats the machine's memory (it gets a
    MemoryError) nor blocks the test forever (the FIFO is opened for writing to release it)."""
    outcome: dict[str, BaseException | None] = {}

    def run() -> None:
        try:
            call(path)
            outcome["error"] = None
        except BaseException as exc:  # noqa: BLE001 - judged below
            outcome["error"] = exc

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    in_use = int(next(line for line in Path("/proc/self/status").read_text().splitlines()
                      if line.startswith("VmSize:")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (in_use + (1 << 30), hard))
    try:
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(PATIENCE_S)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        if worker.is_alive() and path.is_fifo():
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert not worker.is_alive(), f"reading {path.name} blocked"
    error = outcome.get("error")
    assert isinstance(error, expected), repr(error)
    assert "not a regular file" in str(error)


@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_every_user_file_reader_refuses_them(tmp_path, kind):
    path = _hostile_paths(tmp_path)[kind]
    _refused(path, read_known, KnownFileError)
    _refused(path, PreprocessConfig.from_hf_json, ConfigError)
    _refused(path, load_json, InputError)
    py = tmp_path / f"{kind}.py"
    if kind == "fifo":
        os.mkfifo(py)
    else:
        py.symlink_to("/dev/zero")
    _refused(py, lambda p: load_candidate(f"{p}:preprocess"), CandidateError)


def test_a_file_over_the_byte_cap_is_refused(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 101)
    with pytest.raises(InputError, match="byte cap of 100"):
        read_file(path, max_bytes=100)


@pytest.mark.parametrize("value,problem", [("9" * 400, "out of range"), ("1e400", "not a finite number"),
                                           ("inf", "not a finite number"), ("nan", "not a finite number")])
def test_a_bad_number_in_a_known_file_names_its_key(tmp_path, value, problem):
    path = tmp_path / "k.toml"
    path.write_text(f'schema_version = 1\n[[known]]\nroot_cause = "x"\nmode_class = "RGB"\nmax_levels = {value}\n')
    with pytest.raises(KnownFileError, match=rf"known\[0\]\.max_levels: .*{problem}"):
        read_known(path)


def test_deep_nesting_is_refused_before_the_parser_recurses(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text("schema_version = 1\nx = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(KnownFileError, match="line 2: arrays or tables nested more than 64 deep"):
        read_known(path)
    cfg = tmp_path / "c.json"
    cfg.write_text('{"patch_size": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match="nested more than 64 deep"):
        PreprocessConfig.from_hf_json(cfg)


def test_a_huge_number_in_a_config_names_its_key(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"media_proc_cfg": {"in_patch_limit": ' + "9" * 400 + "}}")
    with pytest.raises(ConfigError, match=r"media_proc_cfg\.in_patch_limit: number out of range"):
        PreprocessConfig.from_hf_json(cfg)


def _nesting_model(text: str, toml: bool) -> bool:
    # The rule as a character walk (the spec of `_check_nesting`): strings skipped ("...",
    # '...', and the triple forms; a backslash escapes in the double-quoted ones; unterminated:
    # to the end), TOML comments skipped, closers never below zero. True: within the limit.
    depth, i, n = 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "[{":
            depth += 1
            if depth > files.MAX_NESTING:
                return False
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif toml and ch == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif ch in "\"'":
            quote = next(q for q in ('"""', "'''", '"', "'") if text.startswith(q, i))
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                i += 2 if text[i] == "\\" and quote[0] == '"' else 1
            i += len(quote)
            continue
        i += 1
    return True


def test_the_nesting_check_follows_the_character_walk_and_stays_linear():
    import random

    rng = random.Random(5)
    deep = "[" * (files.MAX_NESTING + 1)
    pieces = ['"', "'", '"""', "'''", "\\", "\\\"", "[", "]", "{", "}", "#", "\n", "a", deep]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        for toml in (False, True):
            try:
                files._check_nesting(text, "x", toml=toml)
                accepted = True
            except InputError:
                accepted = False
            assert accepted == _nesting_model(text, toml), (text, toml)
    # A string that cannot end (escaped quotes, a final lone backslash) is one token, matched
    # once: never scanned again from each escaped quote inside it (quadratic on hostile text).
    for opener in ('"', '"""'):
        text = opener + '\\"' * 1000 + "\\"
        tokens = list(files._JSON_TOKENS.finditer(text))
        assert [(t.start(), t.end()) for t in tokens] == [(0, len(text))]


def test_long_strings_are_parsed_in_memory_near_their_size():
    # A 2.4 MB document holding long strings (one plain, one of escapes): the nesting scan kept a
    # backtracking mark per character (240 MB here, 450 MB for a 3.4 MB scenario.json prompt).
    import tracemalloc

    text = '["' + "Describe " * 200_000 + '", "' + "\\n" * 300_000 + '"]'
    tracemalloc.start()
    try:
        data = files.parse_json(text, "doc.json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(data[0]) == 1_800_000 and data[1] == "\n" * 300_000
    assert peak < 4 * len(text), f"{peak} bytes at the peak for a {len(text)}-character document"
