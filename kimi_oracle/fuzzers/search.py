"""The fuzz engine's search loop: one run's state, its saved failures replayed, examples drawn and judged."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from PIL import Image

from kimi_oracle.core import interrupts
from kimi_oracle.core.activity import HarnessMeter
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import fresh_seed
from kimi_oracle.core.errors import KimiOracleError
from kimi_oracle.fuzzers.budget import _Budget
from kimi_oracle.fuzzers.cases import _Record, example_source, outcome_digest
from kimi_oracle.fuzzers.options import FuzzOptions, FuzzRun
from kimi_oracle.fuzzers.peel import _Peeling
from kimi_oracle.fuzzers.publishing import Publisher
from kimi_oracle.fuzzers.settle import _Settling
from kimi_oracle.fuzzers.shrink import _HarnessAbort, _Shrinking
from kimi_oracle.inputs.draw import ChoiceSource, ReplayError, draw_fuzz_case
from kimi_oracle.inputs.generators import FuzzCase
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.oracle.checks import CHECKS, CRASH, TIMEOUT, Tolerance, Verdict, full_verdict
from kimi_oracle.oracle.gpu_oracle import REFUSED
from kimi_oracle.oracle.grouping import finding_key, image_at_fault, mode_class
from kimi_oracle.oracle.judge import Rejected, evaluate


def _database(directory: Path) -> Any:
    """The saved failures: hypothesis' directory database (entries are written to a temporary file
    and renamed into place), values are choice sequences (`hypothesis.database.choices_to_bytes`)."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    return DirectoryBasedExampleDatabase(str(directory))


def _namespace(candidate: Candidate, config: PreprocessConfig, options: FuzzOptions, tol: Tolerance) -> bytes:
    """The database key of a run's saved failures: one per candidate, profile, drawing options,
    tolerance and assumed variants (`--assume`; none: the key as before), so that a replay is
    relevant (and a stored diagnosis is the same reference's)."""
    parts: list[Any] = [candidate.spec, config.image_hf_json(), dataclasses.asdict(options.draw_options()), str(tol)]
    if options.assume:
        parts.append([list(pair) for pair in options.assume])
    return ("fuzz-cases:" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]).encode()


class _Engine(_Budget, _Shrinking, _Settling, _Peeling):
    """One fuzz run's state and stages (fuzz() below is the public entry)."""

    def __init__(self, candidate: Candidate, config: PreprocessConfig, options: FuzzOptions,
                 out_dir: str | Path | None, on_example: Callable[[FuzzRun], None] | None):
        from kimi_oracle.core.files import utc_now

        self.candidate, self.config, self.options = candidate, config, options
        self.out_dir, self.on_example = out_dir, on_example
        self.tol = Tolerance.parse(options.tolerance)
        seed = options.seed if options.seed is not None else fresh_seed()
        self.run = FuzzRun(candidate.spec, config, options, seed)
        self.run.started = utc_now()
        self.draw_options = options.draw_options()
        self.clock = options.clock
        self.start = self.clock()
        self.budget = options.budget_s
        self.records: dict[str, _Record] = {}
        self.first_cases: dict[str, _Record] = {}  # each unpublished group's first case (diagnosed when met)
        self.seen: dict[str, dict[str, Any]] = {}  # per group: generated examples hit, largest levels
        self.hanging: set[str] = set()  # mode classes of the images the candidate timed out on
        self.last_new = 0  # the example number the latest new group was met at
        self.published: set[str] = set()  # groups whose finding is out (a budget's later search)
        self.longest = {False: 0.0, True: 0.0}  # the longest example so far: ordinary, tile-crossing
        self.last_done: float | None = None  # when the latest example's judging (and noting) ended
        # Under FuzzOptions.overhead_s: the harness's time in the search (read every OVERHEAD_CHECK_S,
        # from next_overhead_check on).
        self.harness: HarnessMeter | None = None
        self.next_overhead_check = self.start
        self.database = _database(options.db_dir) if options.db_dir else None
        # fuzz_pair: the baseline's engine, judged on every generated example of this one in lockstep
        self.partner: _Engine | None = None
        self.db_key = _namespace(candidate, config, options, self.tol)
        # fuzz_pair: each group's first case is diagnosed when met (the gate compares root causes
        # of first and shrunk cases, NEW's and OLD's); fuzz(): when published, within a budget.
        self.eager_diagnosis = False
        # fuzz(): each explained group's causes applied to the reference, and the search for
        # further ones goes on there (`fuzzers.peel`); per group, the causes applied after it.
        self.peeling = options.peel
        self.peeled: dict[str, tuple[tuple[str, str], ...]] = {}
        self.publisher = Publisher(self.clock, options.db_dir, options.diagnosis_share)

    # -- one evaluation

    def judge(self, case: FuzzCase, invariance: bool, *, shrinking: bool = False, hangs_judged: bool = False,
              after: Sequence[tuple[str, str]] = ()) -> tuple[list[Image.Image], Verdict] | None:
        """The verdict on one case; None when the reference rejects it or it is not judged.
        `after`: explained causes the reference is taken with (a peeled group's, `fuzzers.peel`)."""
        return self.finish(self.begin(case, shrinking=shrinking, hangs_judged=hangs_judged), invariance,
                           shrinking=shrinking, after=after)

    def begin(self, case: FuzzCase, *, shrinking: bool = False, images: list[Image.Image] | None = None,
              hangs_judged: bool = False) -> tuple[list[Image.Image], PreprocessConfig, Any] | None:
        """A case's images and config, and the candidate's call on them started (`Candidate.start_call`: an
        executor's candidate works on them while this process goes on); None when not judged.
        `hangs_judged`: a mode class the candidate hung on is judged all the same (shrinking a
        timeout, whose every step is such a case; the costly-step cap bounds what it waits)."""
        interrupts.raise_if_requested()  # an interrupt swallowed elsewhere is not lost
        if images is None:
            images = case.make_images()
        if not hangs_judged and self.hanging and any(mode_class(img) in self.hanging for img in images):
            # A mode class the candidate already hung on would cost a whole case timeout again
            # and could only re-find that timeout: not judged, counted apart.
            if not shrinking:
                self.run.skipped_hanging += 1
            return None
        try:
            return images, case.config, self.candidate.start_call(images, case.config)
        except KimiOracleError as exc:
            raise _HarnessAbort(exc) from None

    def finish(self, started: tuple[list[Image.Image], PreprocessConfig, Any] | None, invariance: bool, *,
               shrinking: bool = False, expected: Any = None, same_as: Verdict | None = None,
               brief: bool = False, after: Sequence[tuple[str, str]] = ()) -> tuple[list[Image.Image], Verdict] | None:
        """The verdict on a begun case (the reference runs now, then the call's result is taken);
        `brief`: a pixel mismatch judged as far as its group (`note` completes what it records)."""
        if started is None:
            return None
        images, config, call = started
        run = self.run
        run.calls += 1
        if shrinking:
            run.shrink_calls += 1
        oracle = self.options.oracle
        steps = self.steps_for(config, after)
        if oracle is not None and expected is None and same_as is None:
            before = len(oracle.disagreements)
            expected = oracle.expected(images, config, steps)  # (--oracle gpu; None: the reference's)
            for d in oracle.disagreements[before:]:
                d.example = self.run.examples
        try:
            verdict = evaluate(self.candidate, images, config, self.tol, invariance=invariance, call=call,
                               expected=expected, same_as=same_as, brief=brief, steps=steps)
            if oracle is not None and not verdict.ok and verdict.check in CHECKS:  # (crashes: whatever the expected)
                verdict = self.confirmed(oracle, images, config, expected, verdict, invariance, brief, steps)
        except Rejected:
            if not shrinking:
                run.rejected += 1
            return None
        except KimiOracleError as exc:
            raise _HarnessAbort(exc) from None
        if self.on_example is not None:
            self.on_example(run)
        return images, verdict

    def confirmed(self, oracle: Any, images: list[Image.Image], config: PreprocessConfig, expected: Any,
                  verdict: Verdict, invariance: bool, brief: bool, steps: Any) -> Verdict:
        """A failure judged against the GPU oracle's result, recomputed by the reference: the verdict,
        or the example judged again (a new call) where the GPU pipeline was wrong (fallen back)."""
        before = len(oracle.disagreements)
        checked = oracle.confirm(images, config, expected)
        for d in oracle.disagreements[before:]:
            d.example = self.run.examples
        if checked is None:
            return verdict
        return evaluate(self.candidate, images, config, self.tol, invariance=invariance,
                        expected=None if checked is REFUSED else checked, brief=brief, steps=steps)

    def group_of(self, verdict: Verdict, images: Sequence[Image.Image]) -> str:
        check = str(verdict.check)
        return finding_key(check, verdict.stats, images) if self.options.split_by_mode else check

    def note(self, case: FuzzCase, choices: Sequence[int], images: list[Image.Image], verdict: Verdict,
             invariance: bool, *, saved: bool = False, took: float = 0.0, tile: bool = False,
             number: int | None = None) -> None:
        """Record a failing example (replayed or generated): hits, levels, a group's first case.
        A tile-crossing example (one image of ~256-2048 px sides: a short choice sequence) never
        replaces a group's case: shrinking and diagnosing it would cost hundreds of small ones.
        `number`: the example's number (1-based; default: the examples counted so far, which is it
        unless the search has begun the next one already)."""
        check = str(verdict.check)
        group = self.group_of(verdict, images)
        after: tuple[tuple[str, str], ...] = ()
        if group in self.published:
            # (a published group's example: a further cause there is its peeled group's)
            peeled = self.past_published(group, case, images, verdict)
            if peeled is None:
                return
            group, verdict, after = peeled
        seen = self.seen.setdefault(group, {"hits": 0, "max": 0.0})
        seen["hits"] += 1
        _note_modes(seen, check, verdict, images)
        level = verdict.stats.get("max_level_diff")
        if isinstance(level, (int, float)):
            seen["max"] = max(seen["max"], float(level))
        example = number if number is not None else self.run.examples
        known = self.records.get(group)
        if known is not None:
            # Hypothesis keeps the simplest failing case of each kind it generated; so do we: the
            # shrink starts from it (shorter choice sequences first, then smaller choices).
            if not known.saved and not tile and (len(choices) < len(known.choices)
                                    or len(choices) == len(known.choices) and tuple(choices) < known.choices):
                self.records[group] = _Record(case, tuple(choices), self.completed(verdict, case, images),
                                              known.example, invariance, False, cost_to_judge=took,
                                              after=known.after, peeled_from=known.peeled_from)
            return
        verdict = self.completed(verdict, case, images)
        self.last_new = example
        self.run.first_found.setdefault(check, example)
        record = _Record(case, tuple(choices), verdict, example, invariance, saved, cost_to_judge=took, tile=tile,
                         after=after, peeled_from=self.peeled_from(after))
        self.records[group] = record
        self.first_cases[group] = record
        if check == TIMEOUT and len(images) == 1:
            self.hanging.add(mode_class(images[0]))
        if not self.eager_diagnosis:
            # Diagnosed when published (fuzz()): publishing is expected to take what it took so far.
            record.cost = self.publisher.estimate()
            return
        # The first case is diagnosed when it is met: its finding is published as is when the
        # case is not shrunk, its root causes are compared with the shrunk case's, and what it
        # cost tells the budget how long publishing this group will take.
        began = self.clock()
        record.finding = self.finding(record)
        record.cost = self.clock() - began

    def completed(self, verdict: Verdict, case: FuzzCase, images: Sequence[Image.Image]) -> Verdict:
        """A search's brief verdict made whole (its two results compared again in full), the
        moment it is recorded; any other verdict as it is."""
        return full_verdict(verdict, case.config, self.tol, [img.size for img in images])

    def replay_saved(self, target: int) -> None:
        """Replay the saved failures first (each an example); entries that no longer fail, or no
        longer describe a case of these options, are deleted."""
        from hypothesis.database import choices_from_bytes

        if self.database is None:
            return
        run = self.run
        entries = sorted(self.database.fetch(self.db_key), key=lambda b: (len(b), b))
        for blob in entries:
            if run.examples >= target or self.over(1.0):
                return
            choices = choices_from_bytes(blob)
            source = ChoiceSource(choices or ())
            try:
                if not choices or not all(isinstance(c, int) for c in choices):
                    raise ReplayError("not a list of integers")
                case = draw_fuzz_case(source, self.config, self.draw_options)
                if not source.exhausted:
                    raise ReplayError("choices left over")
            except (ReplayError, ValueError):
                self.database.delete(self.db_key, blob)
                continue
            run.examples += 1
            run.replayed += 1
            judged = self.judge(case, True)
            if judged is None:
                continue
            images, verdict = judged
            if verdict.ok:
                self.database.delete(self.db_key, blob)
                continue
            self.note(case, choices, images, verdict, True, saved=True)

    def search(self, target: int) -> None:
        """Generated examples until `target` examples ran, the budget's search share is spent or
        (keep_searching=False) something failed."""
        run, options = self.run, self.options
        every = max(1, int(options.invariance_every))
        first = run.replayed  # generated example i is run example first + i
        if run.stopped == "budget":
            run.stopped = "examples"  # a later pass (time left after shrinking) decides anew
        # One example ahead: example i+1 is drawn, made and sent to the candidate before example
        # i is judged (the reference, the comparison), so that a candidate in an executor process
        # works while this process does. Not with keep_searching=False, whose stop depends on
        # each verdict before the next example.
        ahead = options.keep_searching
        self.last_done = None  # (a later pass: the time shrinking took is no example's)
        pending: dict[str, Any] | None = None
        while True:
            upcoming = self.next_example(target, first, every, pending)
            if pending is not None and upcoming is not None and self.hung(pending):
                self.complete(pending)  # its hang decides whether the next one is judged
                pending = None
            if upcoming is not None:
                images = upcoming.pop("images")
                upcoming["started"] = self.begin(upcoming["case"], images=images)
                if self.partner is not None:  # the baseline works on the same images meanwhile
                    self.partner.run.examples += 1
                    upcoming["partner_started"] = self.partner.begin(upcoming["case"], images=images)
            if pending is not None:
                self.complete(pending)
            if upcoming is None:
                return
            pending = upcoming
            if not ahead:
                self.complete(pending)
                pending = None

    def next_example(self, target: int, first: int, every: int, pending: dict[str, Any] | None
                     ) -> dict[str, Any] | None:
        """The next generated example (drawn and made, counted), or None when the search ends
        (run.stopped says why when it is not the example count)."""
        run, options = self.run, self.options
        if run.examples >= target:
            return None
        if interrupts.requested():
            run.stopped = "interrupted"
            return None
        if self.records and not options.keep_searching and self.round_over():
            return None
        if self.overhead_spent():
            run.stopped = "overhead"
            return None
        i = run.examples - first
        source, tile = example_source(run.seed, i, options.tile_share, options.photo_examples,
                                      options.photo_every, options.modes)
        # The example in flight counts as begun: the next one must end within the budget too.
        if self.search_over(self.longest[tile], self.longest[pending["tile"]] if pending else 0.0):
            run.stopped = "budget"
            return None
        run.examples += 1
        case = draw_fuzz_case(source, self.config, self.draw_options)
        return {"i": i, "number": run.examples, "source": source, "tile": tile, "case": case,
                "invariance": options.invariance and i % every == 0, "images": case.make_images()}

    @staticmethod
    def hung(pending: dict[str, Any]) -> bool:
        """Whether the example in flight hung on either side (waited for): then it is judged
        before the next one starts."""
        hangs = False
        for key in ("started", "partner_started"):
            started = pending.get(key)
            wait = getattr(started[2], "wait", None) if started is not None else None
            hangs = (wait is not None and wait() == TIMEOUT) or hangs
        return hangs

    def complete(self, example: dict[str, Any]) -> None:
        """Judge a begun generated example and record what it found (then the partner's call on
        it, against the same expectation)."""
        judged = self._complete(example)
        if self.partner is not None:
            expected = judged[1].expected if judged is not None else None
            self.partner._complete({**example, "started": example.get("partner_started"), "expected": expected,
                                    "same_as": judged[1] if judged is not None else None})

    def _complete(self, example: dict[str, Any]) -> tuple[list[Image.Image], Verdict] | None:
        run = self.run
        began = self.clock()  # waiting for the candidate's answer, the reference, the comparison
        # Brief verdicts (`finish`) for the ordinary examples; a large one (tile-crossing, a real
        # photo) is compared once, in full: completing it would compare its megapixels twice.
        judged = self.finish(example["started"], example["invariance"], expected=example.get("expected"),
                             same_as=example.get("same_as"), brief=not example["tile"])
        done = self.clock()
        took = done - began
        # What an example costs the search: from the end of the previous one's judging (its
        # diagnosis excluded) to the end of this one's, the next example's drawing and making
        # included; the longest of its kind tells the budget whether another one fits.
        period = done - self.last_done if self.last_done is not None else took
        tile = example["tile"]
        self.longest[tile] = max(self.longest[tile], took, period)
        try:
            if self.options.record_outcomes:
                run.outcomes[example["i"]] = outcome_digest(judged[1] if judged is not None else None)
            if judged is None:
                return None
            images, verdict = judged
            if not verdict.ok:
                self.note(example["case"], example["source"].choices, images, verdict, example["invariance"],
                          took=took, tile=example["tile"], number=example["number"])
            return judged
        finally:
            self.last_done = self.clock()


def _note_modes(seen: dict[str, Any], check: str, verdict: Verdict, images: Sequence[Image.Image]) -> None:
    """The mode classes a group's examples hit (every image of a crashed call: the call is at fault)."""
    if not images:
        return
    modes = seen.setdefault("modes", set())
    if check == CRASH:
        modes.update(mode_class(img) for img in images)
    else:
        modes.add(mode_class(images[min(image_at_fault(verdict.stats), len(images) - 1)]))
