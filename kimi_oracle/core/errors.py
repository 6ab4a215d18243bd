"""Typed errors and the exit codes: every failure the tool reports maps to one of these and to a code."""

from __future__ import annotations

# The exit codes of every command, defined here once: 0 success or nothing found, 1 a check failed
# or a finding was made, 2 bad usage, bad input or a harness error, 130 after SIGINT (Ctrl-C) and
# 143 after SIGTERM (128 + the signal's number; `core.interrupts.exit_code()` picks one).
EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class KimiOracleError(Exception):
    """Base class of every error kimi-oracle raises on purpose."""

    exit_code = EXIT_ERROR


class ConfigError(KimiOracleError, ValueError):
    """A preprocessing configuration is missing a key or holds a bad value."""

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(f"config key {key!r}: {reason}")


class InputError(KimiOracleError, ValueError):
    """An input image is unusable: corrupt, truncated, empty, too large, or of a bad type."""

    def __init__(self, reason: str, *, source: str | None = None):
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}" if source else reason)


class PlanError(InputError):
    """The checkpoint's geometry rejects this size (its side assert fails)."""


class BackendError(KimiOracleError, RuntimeError):
    """No usable compute backend (CUDA or the Triton interpreter), or an unverified library."""


class CandidateError(KimiOracleError):
    """A candidate spec cannot be loaded, or the candidate returned something unusable."""


class WriteError(KimiOracleError, OSError):
    """A file of ours could not be written (a full disk, the file-size limit, permissions): names
    the file. An OSError too, so that every handler of a failed write still catches it."""

    _HINTS = {28: "no space left on the device", 27: "over the file-size limit (ulimit -f)",
              122: "over the disk quota", 13: "permission denied", 30: "a read-only file system"}

    def __init__(self, path: str, exc: OSError):
        hint = self._HINTS.get(exc.errno or 0) or exc.strerror or str(exc)
        OSError.__init__(self, exc.errno, f"cannot write {path}: {hint}")
        self.path = path

    def __str__(self) -> str:
        return str(self.strerror)


class AssumptionError(KimiOracleError, ValueError):
    """An assumed step variant (`--assume FAMILY=VARIANT`, a `--known` file's variant) names no
    family or no variant of the diagnosis catalogue."""
