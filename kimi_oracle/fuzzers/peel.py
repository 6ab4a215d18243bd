"""Every bug its own finding (issue 41, item 4): once a group's finding is explained, its variants
are applied to the reference side for that group (the candidate's inferred pipeline so far) and
the group's cases are judged again there; what still differs is a further cause, recorded as a
group of its own (`KEY{after family/variant+...}`), shrunk against that reference and published
with its own minimal case. Later examples of a published group are judged the same way.

A cause met only on a larger case (a 1x1 shrunk case holds too few values to show a resize) is
then found, instead of being masked by the cause the shrink kept.
"""

from __future__ import annotations

from typing import Any, Sequence

from PIL import Image

from kimi_oracle.fuzzers.cases import _Record
from kimi_oracle.inputs.generators import FuzzCase
from kimi_oracle.oracle.checks import PIXEL_MISMATCH, Verdict, compare
from kimi_oracle.results.report import Finding

# Causes applied one after another on one group's line (a stack deeper than this is reported as
# the last group's finding, explained or not).
MAX_PEELED = 4

Pair = tuple[str, str]


def after_suffix(after: Sequence[Pair]) -> str:
    """The key suffix of a group judged with `after` applied: `{after pad/pad-white+...}`."""
    return "{after " + "+".join(f"{f}/{v}" for f, v in after) + "}" if after else ""


def explained_pairs(finding: Finding) -> tuple[Pair, ...]:
    """The (family, variant) pairs that reproduce a finding bit for bit (none unless explained)."""
    from kimi_oracle.core.explanation import EXPLAINED

    att = finding.attribution or {}
    if finding.check != PIXEL_MISMATCH or att.get("explanation") != EXPLAINED:
        return ()
    pairs = []
    for name in att.get("variants") or []:
        family, _, variant = str(name).partition("/")
        if family and variant:
            pairs.append((family, variant))
    return tuple(pairs)


def mark_peeled(finding: Finding, after: Sequence[Pair], peeled_from: str | None) -> None:
    """A peeled group's finding says so: `after` (the causes applied, `family/variant` names),
    `peeled_from` (the group they explain) in its extra, its key suffixed, its message prefixed
    (`extra["assume"]` holds them too, after `--assume`'s, so that `repro` takes the same
    reference)."""
    from kimi_oracle.oracle.diagnosis import full_name

    names = [full_name(f, v) for f, v in after]
    finding.extra["after"] = names
    if peeled_from is not None:
        finding.extra["peeled_from"] = peeled_from
    finding.key = (finding.key or finding.check) + after_suffix(after)
    finding.message = (f"with {', '.join(names)} applied to the reference (the explained causes of "
                       f"{peeled_from or 'an earlier finding'}), still: {finding.message}")


# Of the values the causes change on a case, the share that must come closer to the candidate for
# the causes to count as shown by that case (each cause of a real stack moves every value it
# touches towards the candidate; a clamp fitted on a 1x1 shrunk case, met again on the first case,
# moved 1,279 of 2,922 closer and 1,642 away: a coincidence of a few values, not a cause).
CLOSER_SHARE = 0.9


def closer(before: Verdict, after: Verdict) -> bool:
    """Whether applying the causes brought the reference closer to the candidate, or left that
    case's reference as it was (causes it does not reach). Closer: fewer levels of difference in
    all, and at least `CLOSER_SHARE` of the values the causes change moved towards the
    candidate's. A shrunk case's wrong explanation, met again on a larger case, fails that: then
    nothing is peeled and that case is diagnosed on its own."""
    import math

    from kimi_oracle.oracle.checks import update_digest

    if before.expected is not None and after.expected is not None:
        import hashlib

        digests = []
        for v in (before, after):
            h = hashlib.sha256()
            update_digest(h, v.expected)
            digests.append(h.digest())
        if digests[0] == digests[1]:
            return True

    def total(v: Verdict) -> float:
        mean = v.stats.get("mean_level_diff")
        return float(mean) if isinstance(mean, (int, float)) and math.isfinite(mean) else math.inf

    return total(after) < total(before) and _moved_towards(before, after)


def _moved_towards(before: Verdict, after: Verdict) -> bool:
    """Whether at least `CLOSER_SHARE` of the values that differ between the two references came
    closer to the candidate's (True where the rows cannot be paired value for value)."""
    if before.expected is None or after.expected is None or after.actual is None:
        return True
    old = before.expected.pixel_values
    new = after.expected.pixel_values
    got = after.actual.pixel_values
    if not old.shape == new.shape == got.shape:
        return True  # (another grid: the totals decide)
    old, new, got = old.double(), new.double(), got.double()
    changed = old != new
    n = int(changed.sum())
    if n == 0:
        return True
    towards = int(((new - got).abs() < (old - got).abs())[changed].sum())
    return towards >= CLOSER_SHARE * n


def _applicable(config: Any, pairs: Sequence[Pair]) -> bool:
    """Whether every variant names a step of the reference under `config` (a batch-level
    explanation, `patch-order/rows-of-image-J`, does not)."""
    from kimi_oracle.oracle.diagnosis.catalogue import BY_ID

    for family, variant in pairs:
        try:
            BY_ID[family].variant(config, variant)
        except KeyError:
            return False
    return True


class _Peeling:
    """The engine's peeling (mixed into `fuzzers.search._Engine`)."""

    peeled: dict[str, tuple[Pair, ...]]

    def steps_for(self, config: Any, after: Sequence[Pair]) -> Any:
        """The reference's steps a record's cases are judged with: `--assume`'s, then `after`."""
        from kimi_oracle.oracle.diagnosis import assumed_steps

        assume = tuple(self.options.assume) + tuple(after)
        return assumed_steps(config, assume) if assume else None

    def peeled_from(self, after: Sequence[Pair]) -> str | None:
        """The group whose peel applied `after` (None for none)."""
        return next((g for g, applied in self.peeled.items() if applied == tuple(after)), None) if after else None

    def rejudged(self, case: FuzzCase, actual: Any, after: Sequence[Pair]) -> Verdict | None:
        """The candidate's answer (`actual`) on a case compared with the reference taken with
        `after` applied, on fresh images (a copy of an animation would hold its first frame only);
        None when that reference refuses the input."""
        from kimi_oracle.core.errors import InputError
        from kimi_oracle.pipelines import reference

        images = case.make_images()
        sizes = [img.size for img in images]
        try:
            expected = reference.preprocess(images, case.config, steps=self.steps_for(case.config, after))
        except InputError:
            return None
        return compare(expected, actual, case.config, self.tol, sizes=sizes)

    def past_published(self, group: str, case: FuzzCase, images: list[Image.Image], verdict: Verdict
                       ) -> tuple[str, Verdict, tuple[Pair, ...]] | None:
        """A failing example of a published group: judged again with that group's explained
        causes applied (as often as those groups were peeled); the group, verdict and applied
        causes to record it under, or None when nothing further differs."""
        after: tuple[Pair, ...] = ()
        while group in self.published:
            more = self.peeled.get(group)
            if more is None or verdict.actual is None or verdict.check != PIXEL_MISMATCH:
                return None
            again = self.rejudged(case, verdict.actual, more)
            if again is None or again.ok or again.check != PIXEL_MISMATCH or not closer(verdict, again):
                return None
            after, verdict = more, again
            group = self.group_of(verdict, images) + after_suffix(after)
        return group, verdict, after

    def peel(self, group: str, record: _Record, finding: Finding, first: _Record | None) -> str | None:
        """After `group`'s finding is published: its explained variants applied to the
        reference, its first case (`first`: the unshrunk one met first) judged again; a further
        difference is a group (returned: a new one is recorded for the settle to shrink and
        publish), else None."""
        if not getattr(self, "peeling", False):
            return None
        pairs = [p for p in explained_pairs(finding) if p not in self.options.assume and p not in record.after]
        if not _applicable(record.case.config, pairs):
            return None  # (a batch-level cause, another image's rows: no reference step to apply)
        # (a family explained again replaces its earlier variant: a shrunk case's explanation
        # the larger case corrects)
        families = {f for f, _ in pairs}
        after = tuple(p for p in record.after if p[0] not in families) + tuple(pairs)
        if not pairs or len(after) > MAX_PEELED:
            return None
        case = first
        if case is None or case.verdict.actual is None:
            self.peeled[group] = after  # (later examples of the group are judged with them: past_published)
            return None  # (the finding's own case: its explanation reproduces it)
        images = case.case.make_images()
        verdict = self.rejudged(case.case, case.verdict.actual, after)
        if verdict is None or verdict.check not in (None, PIXEL_MISMATCH) or not verdict.ok and not closer(
                case.verdict, verdict):
            return None  # (not a cause the first case shows: it is diagnosed on its own)
        self.peeled[group] = after
        if verdict.ok:
            return None
        verdict = self.completed(verdict, case.case, images)
        derived = self.group_of(verdict, images) + after_suffix(after)
        if derived in self.records or derived in self.published:
            # (a group met already, from another group's peel: this case counts there)
            seen = self.seen.setdefault(derived, {"hits": 0, "max": 0.0})
            seen["hits"] += 1
            seen["max"] = max(seen["max"], float(verdict.stats.get("max_level_diff") or 0.0))
            return derived
        new = _Record(case.case, case.choices, verdict, case.example, False, cost_to_judge=case.cost_to_judge,
                      tile=case.tile, after=after, peeled_from=group)
        self.records[derived] = new
        self.first_cases[derived] = new
        self.seen.setdefault(derived, {"hits": 1, "max": float(verdict.stats.get("max_level_diff") or 0.0)})
        return derived
