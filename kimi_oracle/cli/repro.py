"""`kimi-oracle repro`: replay one recorded finding against a candidate (or an engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.text import Text

from kimi_oracle.cli.common import interpret_option, setup_interpret
from kimi_oracle.cli.differential import (duration_callback, input_form_option, open_with_form, stdout_console,
                                          tolerance_callback)
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT
from kimi_oracle.core.errors import EXIT_FINDINGS, EXIT_OK, InputError
from kimi_oracle.core.specs import refuse_spec_inside
from kimi_oracle.core.text import rich_text, safe_text


@click.command("repro")
@click.argument("finding", type=click.Path(exists=True, path_type=Path))
@click.option("--candidate", "candidate_spec", default=None, metavar="SPEC",
              help="Candidate to replay against (default: the one recorded in case.json).")
@click.option("--engine", "engine_spec", default=None, metavar="SPEC",
              help="Engine to replay a scenario finding against (default: the one in scenario.json).")
@click.option("--tolerance", default=None, callback=tolerance_callback, help="Override the recorded tolerance.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the verdict as JSON here.")
@click.option("--case-timeout", "case_timeout", default=DEFAULT_CASE_TIMEOUT, show_default=True,
              callback=duration_callback,
              help="Per-call limit for the candidate, which runs in a separate process: a hang is a timeout.")
@input_form_option
@interpret_option
def repro_cmd(finding: Path, candidate_spec: str | None, tolerance: str | None, json_path: Path | None,
              case_timeout: float, input_form: str | None, interpret: bool | None,
              engine_spec: str | None = None) -> int:
    """Replay one finding (its directory or case.json). Exit 1 while it still fails, 0 once fixed.

    The finding folder is untrusted: case.json is validated, files must be plain names inside
    the folder with their recorded SHA-256, and a candidate is never imported from inside it.
    The candidate runs in a separate process, so a crash or hang is reported, never fatal.
    """
    from kimi_oracle.results.scenario_report import SCENARIO_FILE

    if (finding / SCENARIO_FILE).is_file() or finding.name == SCENARIO_FILE:
        from kimi_oracle.cli.engine_fuzz import run_repro

        return run_repro(finding, engine_spec, json_path, case_timeout)
    from kimi_oracle.core.files import write_json
    from kimi_oracle.fuzzers.fuzzing import replay_case
    from kimi_oracle.results.report import read_case
    setup_interpret(interpret)
    case, directory = read_case(finding)
    spec = candidate_spec or case.get("candidate")
    if not spec:
        raise InputError("case.json names no candidate; give --candidate", source=str(finding))
    if candidate_spec is None:
        refuse_spec_inside(spec, directory)
    console = stdout_console()
    origin = "--candidate" if candidate_spec else "recorded in case.json"
    console.print(rich_text(f"candidate: {spec} ({origin})"), highlight=False)
    with open_with_form(spec, case_timeout, None, input_form) as candidate:
        verdict, images, config, notes = replay_case(case, directory, candidate, tolerance=tolerance)
    for note in notes:
        console.print(rich_text(f"note: {note}"))
    was = case.get("check")
    tol = tolerance or case.get("tolerance") or "exact"
    if verdict.ok:
        console.print(Text.assemble(("fixed", "green"), safe_text(
            f": {directory.name} ({was}) now passes every check with candidate {spec}, tolerance {tol}")),
            highlight=False)
        code = EXIT_OK
    else:
        f = _print_still_failing(console, verdict, case, spec, config, images, tol)
        code = EXIT_FINDINGS
    if json_path is not None:
        write_json(json_path, {"finding": str(directory), "candidate": spec, "was": was,
                               "verdict": verdict.to_dict(), "notes": notes,
                               "root_causes": None if verdict.ok else list(f.root_causes)})
    return code


def _print_still_failing(console: Any, verdict: Any, case: dict[str, Any], spec: str, config: Any,
                         images: Any, tol: str) -> Any:
    """The finding a failing replay makes now, printed (how it differs from the recorded check), and returned."""
    from kimi_oracle.fuzzers.fuzzing import finding_from
    from kimi_oracle.results.report import finding_lines

    was = case.get("check")
    from kimi_oracle.oracle.diagnosis import finding_diagnosis

    # (a replay diagnoses whatever the size: a run defers the attribution of a real photo)
    diagnosis = finding_diagnosis(str(verdict.check), verdict.stats, images, config, expected=verdict.expected,
                                  actual=verdict.actual, large=True)
    f = finding_from(verdict, spec, config, images,
                     params=[e.get("params") for e in case["images"]], tolerance=tol,
                     engine=case.get("engine", "hypothesis"), seed=case.get("seed"),
                     sources=[e.get("source") for e in case["images"]], diagnosis=diagnosis)
    lines = finding_lines(f)
    head = "still fails" if verdict.check == was else f"fails a different check now (was {was})"
    console.print(Text.assemble((head, "bold red"), safe_text(f": {lines[0]}")), highlight=False,
                  soft_wrap=True)
    for line in lines[1:]:
        console.print(rich_text("  " + line), soft_wrap=True)
    if f.root_causes:  # diagnosed now (a fuzz run may have deferred it: its budget's share spent)
        console.print(rich_text("  root causes: " + ", ".join(f.root_causes)), soft_wrap=True)
    return f


def register(group: click.Group) -> None:
    """Attach `repro` to the CLI group."""
    group.add_command(repro_cmd)


__all__ = ["register"]
