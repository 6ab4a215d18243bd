"""The outcome of a check: the failed check's name (None when all passed), a message, stats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kimi_oracle.core.result import PreprocessResult


@dataclass
class Verdict:
    """The outcome of a comparison: the failed check (None when all passed), a message, stats."""

    check: str | None = None
    message: str = "all checks passed"
    stats: dict[str, Any] = field(default_factory=dict)
    # The two results that were compared (for diff images); not part of the JSON form.
    expected: PreprocessResult | None = field(default=None, repr=False, compare=False)
    actual: PreprocessResult | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return self.check is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"ok": self.ok, "check": self.check, "message": self.message, "stats": self.stats}
