"""How far a diagnosis explains a finding: `explained`, `partly explained`, `unexplained`.

A finding is `explained` when a stack of catalogued step variants reproduces the candidate's
output bit for bit, `partly explained` when the variants taken leave a residual, `unexplained`
when none moves the reference towards it (docs/diagnosis.md). `unexplained` is also the
root-cause id of such a finding. Free of torch, for reports and the CLI.
"""

from __future__ import annotations

EXPLAINED = "explained"
PARTLY_EXPLAINED = "partly explained"
UNEXPLAINED = "unexplained"
EXPLANATIONS = (EXPLAINED, PARTLY_EXPLAINED, UNEXPLAINED)
# A finding whose diagnosis a fuzz budget's diagnosis share left for later (`repro` makes it).
DEFERRED = "deferred"

__all__ = ["DEFERRED", "EXPLAINED", "EXPLANATIONS", "PARTLY_EXPLAINED", "UNEXPLAINED"]
