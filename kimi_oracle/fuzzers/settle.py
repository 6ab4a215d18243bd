"""The fuzz engine's settle stage: each group shrunk, saved and published as a finding."""

from __future__ import annotations

import functools
from typing import Any, Collection

from PIL import Image

from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.fuzzers.cases import _Record, finding_from
from kimi_oracle.fuzzers.peel import mark_peeled
from kimi_oracle.fuzzers.shrink import _HarnessAbort
from kimi_oracle.oracle.checks import FINDING_KINDS, PIXEL_MISMATCH
from kimi_oracle.oracle.diagnosis import finding_diagnosis
from kimi_oracle.results.report import Finding, write_finding


class _Settling:
    """The engine's settle stages (mixed into `fuzzers.search._Engine`)."""

    def save(self, group: str) -> None:
        record = self.records[group]
        if self.database is None or record.saved or not record.choices:
            return
        from hypothesis.database import choices_to_bytes

        self.database.save(self.db_key, choices_to_bytes(list(record.choices)))

    def finding(self, record: _Record) -> Finding:
        case = record.case  # fresh images: the candidate may have altered the ones it was given
        images = case.make_images()
        finding = finding_from(record.verdict, self.candidate.spec, case.config, images,
                               params=[p.to_dict() for p in case.images], tolerance=str(self.tol),
                               seed=self.run.seed, example=record.example,
                               diagnosis=self.diagnosis(record, images), assume=self.assumed(record))
        if record.after:
            mark_peeled(finding, record.after, record.peeled_from)
        if finding.check == PIXEL_MISMATCH and len(images) > 1 and not self.eager_diagnosis:
            self.alone(finding, record)
        return finding

    def alone(self, finding: Finding, record: _Record) -> None:
        """A batch's pixel finding: the image at fault judged again alone (one more candidate
        call); `alone` in its extra, and its message says when that image alone is right (a
        difference only the batch has: SGLang's same-size groups, a stale buffer)."""
        from kimi_oracle.core.errors import KimiOracleError
        from kimi_oracle.inputs.images import make_image
        from kimi_oracle.oracle.grouping import image_at_fault
        from kimi_oracle.oracle.judge import Rejected, evaluate

        case = record.case
        k = min(image_at_fault(record.verdict.stats), len(case.images) - 1)
        try:
            verdict = evaluate(self.candidate, [make_image(case.images[k])], case.config, self.tol, invariance=False,
                               steps=self.steps_for(case.config, record.after))
        except (Rejected, KimiOracleError):
            return
        finding.extra["alone"] = {"image": k, "ok": verdict.ok, "check": None if verdict.ok else str(verdict.check)}
        if verdict.ok:
            finding.message += f"; image {k} alone is right: a difference of the batch only"

    def assumed(self, record: _Record) -> tuple[tuple[str, str], ...]:
        """The variants a record's reference is taken with: `--assume`'s, then its peeled causes."""
        return tuple(self.options.assume) + tuple(record.after)

    def diagnosis(self, record: _Record, images: list[Image.Image]) -> dict[str, Any]:
        """The diagnosis fields of a record's finding (`fuzzers.publishing.Publisher.diagnose`;
        fuzz_pair: always a new one)."""
        budget = None if self.eager_diagnosis else self.budget
        assume = self.assumed(record)
        return self.publisher.diagnose(record.verdict, images, record.case.config, (self.db_key, record.choices),
                                       budget, functools.partial(finding_diagnosis, assume=assume)
                                       if assume else finding_diagnosis)

    def publish(self, group: str, past_end: bool = False) -> str | None:
        """The group's finding (and, when shrinking lost root causes, its first case's), written;
        the group peeled from it (its explained causes applied: `fuzzers.peel`), if any.
        `past_end`: the settle's time is spent."""
        run, out_dir = self.run, self.out_dir
        began = self.clock()
        record = self.records[group]
        first = self.first_cases.pop(group, None)
        if record.finding is None and not record.shrunk and first is not None and first.finding is not None and past_end:
            # Past the budget, a simpler case met later (not one the shrink found) is not
            # diagnosed anew: the first case, diagnosed when it was met, is the finding.
            record = first
        finding = record.finding if record.finding is not None else self.finding(record)
        finding.extra["group"] = group
        seen = self.seen.get(group, {})
        finding.hits = max(1, int(seen.get("hits", 1)))
        if seen.get("modes"):
            finding.extra["mode_classes"] = sorted(seen["modes"])
        if seen.get("max") is not None and finding.max_levels is not None:
            finding.max_levels_seen = max(float(seen["max"]), float(finding.max_levels))
        if out_dir is not None:
            self.publisher.writer.submit(write_finding, out_dir, finding)
        run.findings.append(finding)
        peeled = self._after_publish(group, record, first, finding)
        self.publisher.costs.append(self.clock() - began)
        return peeled

    def _after_publish(self, group: str, record: _Record, first: _Record | None, finding: Finding) -> str | None:
        """What a published finding's first case tells further: its explanation checked there,
        then its further causes peeled (a group of their own, returned) or else the causes the
        shrink lost published apart."""
        run, out_dir = self.run, self.out_dir
        first = first if first is not record and self.options.shrink else None
        if finding.check != PIXEL_MISMATCH:
            return None
        unconfirmed = first is not None and _confirm(finding, first) is False
        peeled = self.peel(group, record, finding, first)
        if peeled is not None:
            # (the first case's further causes are the peeled group's, shrunk and published on
            # their own: not a finding of the unshrunk case besides)
            if unconfirmed:
                finding.message = finding.message.replace("that case is diagnosed on its own",
                                                          f"the search goes on with it applied ({peeled})")
            return peeled
        if first is None:
            return None
        # The first case of a key was attributed when it was met (fuzz(): now, while the
        # diagnosis share lasts): root causes that shrinking lost (a small opaque image cannot
        # show straight alpha) are a finding of their own, with that unshrunk case as its repro.
        if (first.finding is None and not self.diagnosis_spent()
                and (not self.eager_diagnosis or unconfirmed and not record.saved)):
            first.finding = self.finding(first)
        if first.finding is None:
            return None
        extra_finding = first.finding
        lost = _lost_causes(finding, extra_finding) or (["unconfirmed"] if unconfirmed else [])
        if lost:
            extra_finding.key = f"{group}{{{'+'.join(lost)}}}"
            extra_finding.extra["group"] = extra_finding.key
            extra_finding.extra["unshrunk"] = "root causes the shrunk case of " + group + " does not show"
            extra_finding.hits = finding.hits
            extra_finding.max_levels_seen = finding.max_levels_seen
            if out_dir is not None:
                self.publisher.writer.submit(write_finding, out_dir, extra_finding)
            run.findings.append(extra_finding)
        return None

    def settle(self, shrink: bool = True, until: float | None = None, keep: Collection[str] = ()) -> None:
        """Shrink (unless off, interrupted or replayed from the database), save and publish every
        group in report order; the time left until `until` (default: the budget's end) is shared
        among the groups still to go, each given its share minus the time publishing one has
        taken on average. Groups in `keep` are published as they were met (not shrunk)."""
        run = self.run
        end = until if until is not None else self.start + self.budget if self.budget is not None else None
        order = {c: i for i, c in enumerate(FINDING_KINDS)}
        groups = sorted(self.records, key=lambda g: (order.get(g.split("[")[0], 99), self.records[g].example, g))
        abort: _HarnessAbort | None = None
        for k, group in enumerate(groups):
            shrinkable = (shrink and self.options.shrink and abort is None and run.stopped != "interrupted"
                          and not self.records[group].saved and group not in keep)
            if shrinkable:
                deadline = None
                if end is not None:
                    # Publishing (diagnosis, files) cannot stop half-way: every group still to go
                    # keeps the average publishing time so far; the rest is shared for shrinking.
                    # The first case's diagnosis time stands for each group's publishing time.
                    now = self.clock()
                    to_shrink = [g for g in groups[k:] if g not in keep]
                    reserve = (sum(self.first_cases.get(g, self.records[g]).cost for g in to_shrink)
                               if self.eager_diagnosis
                               else len(to_shrink) * self.publisher.estimate() + self.publisher.backlog())
                    deadline = now + (end - now - reserve) / len(to_shrink)
                try:
                    if deadline is None or deadline > self.clock():
                        with self.publisher.times.shrinking.span():
                            self.shrink(group, deadline)
                except _HarnessAbort as exc:
                    abort = exc
                except KeyboardInterrupt:
                    run.stopped = "interrupted"
            self.save(group)
            # (a kept group's finding is its first case, diagnosed when it was met)
            peeled = self.publish(group, past_end=group in keep or (end is not None and self.clock() >= end))
            if peeled is not None and peeled in self.records and peeled not in groups:
                groups.insert(k + 1, peeled)  # (shrunk and published next, against its reference)
        self.published.update(self.records)
        self.records.clear()
        if abort is not None:
            raise abort


def _lost_causes(shrunk: Finding, first: Finding) -> list[str]:
    """Root causes of a key's first case that its shrunk case does not show: not merely an
    equally good alternative (a tie the diagnosis recorded as equivalent) and accounting for at
    least one level there."""
    from kimi_oracle.results.report import cause_levels

    def ties(f: Finding) -> set[str]:
        explained = (f.attribution or {}).get("explained") or []
        return {c for e in explained for c in (e.get("equivalent") or [])}

    known = set(shrunk.root_causes) | ties(shrunk) | ties(first)
    levels = cause_levels(first)
    return [c for c in first.root_causes
            if c not in known and c != "unexplained" and not is_sub_level(levels.get(c, (0.0, 0.0))[0])]


def _confirm(finding: Finding, first: _Record) -> bool | None:
    """The shrunk finding's explanation checked on the case it was first met on (a 1x1 case holds
    too few values to tell arithmetics apart): `confirmed_on_first_case` in its extra, and a
    note in its message when the variants do not reproduce that case. None: not checked (not
    explained, or not measurable there)."""
    from kimi_oracle.core.explanation import EXPLAINED
    from kimi_oracle.oracle.diagnosis.attribution import reproduces
    from kimi_oracle.oracle.grouping import image_at_fault

    att = finding.attribution or {}
    if att.get("explanation") != EXPLAINED or first.verdict.actual is None:
        return None
    case = first.case
    # (the variants on top of the assumed ones: `--assume`'s and a peeled group's)
    holds = reproduces(list(att.get("assumed") or []) + list(att.get("variants") or []), case.make_images(), case.config, first.verdict.actual,
                       image_at_fault(first.verdict.stats))
    finding.extra["confirmed_on_first_case"] = {"example": first.example, "holds": holds}
    if holds is False:
        finding.message += ("; its explanation does not reproduce the case it was first met on (example "
                            f"{first.example}): that case is diagnosed on its own")
    return holds
