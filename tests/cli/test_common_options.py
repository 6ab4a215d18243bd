import click
import pytest

from kimi_oracle.cli.common import parse_duration, parse_percent


@pytest.mark.parametrize("text, seconds", [
    ("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), ("1h30m", 5400.0),
    ("2m30s", 150.0), ("500ms", 0.5), ("30min", 1800.0), (45, 45.0),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "10x", "m", "0s", "-5s", "1h 3x"])
def test_bad_durations(text):
    with pytest.raises(click.BadParameter):
        parse_duration(text)


def test_percent():
    assert parse_percent("10%") == 10.0 and parse_percent("2.5") == 2.5
    for bad in ("ten", "-1%"):
        with pytest.raises(click.BadParameter):
            parse_percent(bad)
