"""JUnit XML: test cases per check and per root cause, and the document written atomically."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

from kimi_oracle.core.files import atomic_write_text, utc_now
from kimi_oracle.core.text import xml_text
from kimi_oracle.oracle.kinds import PIXEL_MISMATCH
from kimi_oracle.results.aggregation import cause_meaning
from kimi_oracle.results.finding import Finding
from kimi_oracle.results.markdown import _levels, finding_lines



@dataclass
class JUnitCase:
    """One <testcase>: a failure message (and text) when it failed, an error when it could not run."""

    name: str
    classname: str = "kimi-oracle"
    time: float = 0.0
    failure: str | None = None
    details: str = ""
    error: str | None = None
    skipped: str | None = None


def junit_xml(suite: str, cases: Sequence[JUnitCase], *, time: float = 0.0,
              properties: Mapping[str, Any] | None = None) -> str:
    """A JUnit XML document with one testsuite."""
    failures = sum(1 for c in cases if c.failure is not None)
    errors = sum(1 for c in cases if c.error is not None)
    skipped = sum(1 for c in cases if c.skipped is not None)
    def attr(value: Any) -> str:
        return quoteattr(xml_text(value))

    def body(value: Any) -> str:
        return escape(xml_text(value))

    lines = ['<?xml version="1.0" encoding="utf-8"?>',
             f"<testsuites name={attr(suite)} tests=\"{len(cases)}\" failures=\"{failures}\" "
             f"errors=\"{errors}\" time=\"{time:.3f}\">",
             f"  <testsuite name={attr(suite)} tests=\"{len(cases)}\" failures=\"{failures}\" "
             f"errors=\"{errors}\" skipped=\"{skipped}\" time=\"{time:.3f}\" timestamp={quoteattr(utc_now())}>"]
    if properties:
        lines.append("    <properties>")
        for k, v in properties.items():
            lines.append(f"      <property name={attr(k)} value={attr(v)}/>")
        lines.append("    </properties>")
    for c in cases:
        head = f"    <testcase classname={attr(c.classname)} name={attr(c.name)} time=\"{c.time:.3f}\""
        if c.failure is None and c.error is None and c.skipped is None:
            lines.append(head + "/>")
            continue
        lines.append(head + ">")
        if c.failure is not None:
            lines.append(f"      <failure message={attr(c.failure)} type={attr(c.name)}>{body(c.details)}</failure>")
        if c.error is not None:
            lines.append(f"      <error message={attr(c.error)}>{body(c.details)}</error>")
        if c.skipped is not None:
            lines.append(f"      <skipped message={attr(c.skipped)}/>")
        lines.append("    </testcase>")
    lines += ["  </testsuite>", "</testsuites>", ""]
    return "\n".join(lines)


def write_junit(path: str | os.PathLike, suite: str, cases: Sequence[JUnitCase], **kwargs: Any) -> Path:
    """Atomic JUnit XML file."""
    return atomic_write_text(path, junit_xml(suite, cases, **kwargs))


def junit_cases_for(findings: Iterable[Finding | Mapping[str, Any]], checks: Sequence[str], *,
                    classname: str = "kimi-oracle") -> list[JUnitCase]:
    """One test case per check class: failed when any finding has that check."""
    by_check: dict[str, list[Any]] = {c: [] for c in checks}
    for f in findings:
        check = f.check if isinstance(f, Finding) else f["check"]
        by_check.setdefault(check, []).append(f)
    cases = []
    for check, items in by_check.items():
        if not items:
            cases.append(JUnitCase(check, classname))
            continue
        blocks = []
        for f in items:
            text = "\n".join(finding_lines(f)) if isinstance(f, Finding) else "\n".join(
                [f"{f['check']}: {f['message']}"] + ([f"path: {f['path']}"] if f.get("path") else []))
            if isinstance(f, Finding) and f.path is not None:
                text += f"\nfinding: {f.path}\nreproduce: kimi-oracle repro {f.path}"
            blocks.append(text)
        first = items[0]
        message = first.message if isinstance(first, Finding) else first["message"]
        cases.append(JUnitCase(check, classname, failure=f"{len(items)} finding(s): {message}",
                               details="\n\n".join(blocks)))
    return cases



def root_cause_junit(rows: Sequence[Mapping[str, Any]], classname: str) -> list[JUnitCase]:
    """One failed test case per root cause and mode class (listed before the per-check cases)."""
    cases = []
    for r in rows:
        label = f"{r['root_cause']}[{r['mode_class']}]" if r["mode_class"] else r["root_cause"]
        if r["check"] == PIXEL_MISMATCH:
            band = "float rounding only" if r["float_rounding_only"] else f"max {_levels(r['max_levels'])} levels"
            failure = f"{band}, mean {_levels(r['mean_levels'])}; {r['hits']} example(s)"
        else:
            failure = f"{r.get('message', '')}; {r['hits']} example(s)"
        cases.append(JUnitCase(f"root-cause {label}", classname, failure=failure,
                               details=f"{cause_meaning(r['root_cause'])}\nreproduce: kimi-oracle repro {r['repro']}"
                               if r.get("repro") else cause_meaning(r["root_cause"])))
    return cases
