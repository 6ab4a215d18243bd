"""The harness logic without atheris: the FuzzedDataProvider twin, case drawing, signatures,
minimization, the seed corpus and the dictionary."""

from __future__ import annotations

import random

import pytest
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.harnesses import (
    PyFuzzedDataProvider,
    decoder_config,
    minimize_bytes,
    parse_shard,
    structured_case,
)
from kimi_oracle.inputs.corpus import DICTIONARY, dictionary_text, seed_files
from kimi_oracle.inputs.generators import MODES


def test_provider_follows_llvm_byte_order():
    # LLVM's FuzzedDataProvider: integers from the end (last byte most significant first),
    # booleans and byte strings from the front.
    fdp = PyFuzzedDataProvider(bytes(range(1, 11)))
    assert fdp.ConsumeIntInRange(0, 255) == 10
    assert fdp.ConsumeIntInRange(0, 1000) == ((9 << 8) | 8) % 1001
    assert fdp.ConsumeBool() is True  # byte 1
    assert fdp.ConsumeBytes(2) == b"\x02\x03"
    assert fdp.PickValueInList([10, 20, 30]) == [10, 20, 30][7 % 3]
    assert fdp.remaining_bytes() == 3
    empty = PyFuzzedDataProvider(b"")
    assert (empty.ConsumeIntInRange(5, 9), empty.ConsumeBool(), empty.ConsumeBytes(4)) == (5, False, b"")


def test_provider_matches_atheris():
    # atheris is part of the test set-up (the `fuzz` extra, README): a missing or broken one fails
    # here instead of skipping the only check that the twin consumes bytes like the real thing.
    import atheris
    rng = random.Random(1)
    for _ in range(3000):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
        a, b = atheris.FuzzedDataProvider(data), PyFuzzedDataProvider(data)
        for _ in range(10):
            op = rng.randrange(4)
            if op == 0:
                lo = rng.randint(0, 100)
                hi = lo + rng.choice([0, 1, 255, 256, 65535, 65536, 2**24, 2**32 - 1])
                pair = a.ConsumeIntInRange(lo, hi), b.ConsumeIntInRange(lo, hi)
            elif op == 1:
                pair = a.ConsumeBool(), b.ConsumeBool()
            elif op == 2:
                n = rng.randint(0, 6)
                pair = a.ConsumeBytes(n), b.ConsumeBytes(n)
            else:
                values = list(range(rng.randint(1, 300)))
                pair = a.PickValueInList(values), b.PickValueInList(values)
            assert pair[0] == pair[1]
            assert a.remaining_bytes() == b.remaining_bytes()


def test_structured_cases_cover_modes_and_are_deterministic():
    base = PreprocessConfig.k3()
    rng = random.Random(3)
    modes, configs = set(), set()
    for _ in range(400):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 60)))
        case, _ = structured_case(data, base)
        assert structured_case(data, base)[0] == case
        modes.update(p.mode for p in case.images)
        configs.add((case.config.in_patch_limit, case.config.fill_stage))
        assert all(max(p.width, p.height) <= 4 * 64 for p in case.images)
    assert modes == set(MODES)
    assert len(configs) > 10


def test_shards_draw_disjoint_image_seeds():
    base = PreprocessConfig.k3()
    rng = random.Random(5)
    for _ in range(100):
        data = bytes(rng.randrange(256) for _ in range(40))
        for index in (1, 2, 3):
            case, _ = structured_case(data, base, shard=(index, 3))
            assert all(p.seed % 3 == index - 1 for p in case.images)


@pytest.mark.parametrize("text, expected", [("1/1", (1, 1)), ("2/4", (2, 4)), (None, (1, 1))])
def test_parse_shard(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/2", "3/2", "x", "1/0", "2"])
def test_parse_shard_rejects(text):
    with pytest.raises(ValueError):
        parse_shard(text)


def test_decoder_config_is_a_function_of_the_bytes():
    base = PreprocessConfig.k3()
    chosen = {decoder_config(bytes([i]) * 8, base).in_patch_limit for i in range(64)}
    assert decoder_config(b"abc", base) == decoder_config(b"abc", base)
    assert len(chosen) > 1


def test_minimize_bytes_keeps_the_failure():
    # Fails whenever the input holds a 7 after a 3: the minimum is b"\x03\x07".
    def fails(b: bytes) -> bool:
        i = b.find(b"\x03")
        return i >= 0 and b"\x07" in b[i + 1 :]

    data = bytes([1, 2, 3, 9, 9, 9, 7, 5, 5, 5, 5, 5])
    small = minimize_bytes(data, fails, max_tries=200)
    assert fails(small) and len(small) <= 3


def test_seed_files_cover_the_issue_list():
    import io

    kinds = set()
    for name, data in seed_files().items():
        img = Image.open(io.BytesIO(data))
        img.load()
        kinds.add((img.format, img.mode, "transparency" in img.info))
        assert max(img.size) <= 300
    want = {("PNG", "P", True), ("PNG", "LA", False), ("PNG", "I;16", False), ("JPEG", "CMYK", False),
            ("TIFF", "CMYK", False), ("GIF", "P", True)}
    assert want <= kinds
    assert any(f == "WEBP" for f, _, _ in kinds)
    sizes = [Image.open(io.BytesIO(d)).size for d in seed_files().values()]
    assert any(w % 2 and h % 2 for w, h in sizes)  # odd sizes


def test_committed_dictionary_is_current(fuzz_dir):
    assert (fuzz_dir / "png_jpeg.dict").read_text() == dictionary_text()
    assert any(tok == b"\x89PNG\r\n\x1a\n" for _, tok in DICTIONARY)
    assert any(tok == b"\xff\xd8" for _, tok in DICTIONARY)


def test_corpus_seed_command(tmp_path):
    from click.testing import CliRunner

    from kimi_oracle.cli import cli

    result = CliRunner().invoke(cli, ["corpus", "seed", str(tmp_path / "seeds"), "--structured", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (tmp_path / "seeds").iterdir())
    assert set(names) == set(seed_files())
    assert any((tmp_path / "s").iterdir())


def test_kimi_oracle_imports_without_atheris():
    import subprocess
    import sys

    code = ("import sys; sys.modules['atheris'] = None\n"
            "import kimi_oracle.cli, kimi_oracle.fuzzers.harnesses, kimi_oracle.workflows.nightly, kimi_oracle.inputs.corpus\n"
            "from kimi_oracle.fuzzers.harnesses import provider, PyFuzzedDataProvider\n"
            "assert isinstance(provider(b'ab'), PyFuzzedDataProvider)\n"
            "assert not kimi_oracle.workflows.nightly.atheris_available()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)  # a hang guard
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def fuzz_dir():
    from nightly_helpers import FUZZ

    return FUZZ
