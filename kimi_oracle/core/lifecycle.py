"""Started: a context manager that calls `start()` on entry and `close()` on exit."""

from __future__ import annotations

from typing import Any


class Started:
    """Mixin for objects with `start()` and `close()` (the candidate and engine executors)."""

    def start(self) -> None:  # pragma: no cover - always overridden
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - always overridden
        raise NotImplementedError

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["Started"]
