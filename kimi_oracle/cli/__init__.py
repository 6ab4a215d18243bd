"""The `kimi-oracle` command: a click group whose subcommands live in `kimi_oracle.cli`."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from kimi_oracle import __version__
from kimi_oracle.core import interrupts
from kimi_oracle.core.errors import EXIT_ERROR, KimiOracleError, WriteError

# Each module defines `register(group)`. Modules are listed here once; a module that is not
# part of this installation yet is skipped, but one that exists and fails to import is an error.
COMMAND_MODULES = (
    "kimi_oracle.cli.explain",
    "kimi_oracle.cli.fuzz",
    "kimi_oracle.cli.repro",
    "kimi_oracle.cli.check",
    "kimi_oracle.cli.golden",
    "kimi_oracle.cli.nightly",
    "kimi_oracle.cli.merge",
    "kimi_oracle.cli.bench",
    "kimi_oracle.cli.gate",
    "kimi_oracle.cli.gpu",
    "kimi_oracle.cli.engines",
    "kimi_oracle.cli.conformance",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="kimi-oracle")
def cli() -> None:
    """Test oracle and fuzzing suite for Kimi-K3 / K2.5 image preprocessing kernels.

    Exit codes: 0 success / nothing found, 1 a check failed or a finding was made,
    2 bad usage, bad input or a harness error.
    """


def _register_all() -> None:
    for name in COMMAND_MODULES:
        if importlib.util.find_spec(name) is None:
            continue
        importlib.import_module(name).register(cli)


_register_all()


def _inert_streams() -> None:
    # Text from data (a candidate's message, a file name from undecodable bytes) may hold lone
    # surrogates: written escaped, never a UnicodeEncodeError that loses a report.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # pragma: no cover - a stream that cannot change
                pass


def _os_error_line(exc: OSError) -> str:
    """An OSError that reached the top as one line: the file it names and why, in words for the
    limits a user sets (`ulimit -f`, a full disk); `tempfile`'s own message when no temporary
    folder is writable (it tries each, and the last error is all it keeps)."""
    why = WriteError._HINTS.get(exc.errno or 0) or exc.strerror or str(exc)
    if "No usable temporary directory" in str(exc):
        return (f"{exc.strerror or exc}: none can be written (TMPDIR, permissions, a full disk or a "
                "file-size limit, ulimit -f, of 0)")
    if exc.filename is not None:
        return f"{exc.filename}: {why}"
    return f"a file could not be written or read: {why} ({type(exc).__name__})"


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning our typed errors into one line on stderr and exit 2."""
    _inert_streams()
    interrupts.install()
    try:
        code = cli.main(args=argv, prog_name="kimi-oracle", standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        code = interrupts.exit_code()
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except KimiOracleError as exc:
        click.echo(f"error: {exc}", err=True)
        code = exc.exit_code
    except OSError as exc:  # (one our writers did not name: a library's, the temporary folder's)
        click.echo(f"error: {_os_error_line(exc)}", err=True)
        code = EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - last resort: one line and exit 2, never exit 1
        # Exit 1 means "a check failed"; an unexpected failure of the tool itself must not read so.
        click.echo(f"internal error: {type(exc).__name__}: {exc}", err=True)
        code = EXIT_ERROR
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
