"""pytest plugin: run the oracle inside a kernel project's own test suite.

    pytest --kimi-candidate mykernels.preprocess:run --kimi-examples 100

adds one test item per check class (`kimi-oracle::grid_mismatch`, ..., `kimi-oracle::crash`).
The fuzz run happens once, when the first of them runs; each item fails with the shrunk
finding's report when its check found something. Findings are written under `--kimi-out`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT

_RUN_KEY = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the `--kimi-*` options."""
    group = parser.getgroup("kimi-oracle", "differential testing against the Kimi preprocessing reference")
    group.addoption("--kimi-candidate", metavar="SPEC", default=None,
                    help="candidate to test: reference | gpu | eager | sglang-0.5.23 | module:function | file.py:function")
    group.addoption("--kimi-examples", type=int, default=50, metavar="N", help="examples to run (default 50)")
    group.addoption("--kimi-budget", default=None, metavar="DURATION", help="time budget instead, e.g. 60s")
    group.addoption("--kimi-profile", default=None, metavar="NAME", help="k3 (default), k25 or k3-small")
    group.addoption("--kimi-config", default=None, metavar="FILE", help="a preprocessor_config.json")
    group.addoption("--kimi-tolerance", default="exact", metavar="POLICY", help="exact | levels:K | bf16")
    group.addoption("--kimi-seed", type=int, default=None, metavar="S", help="seed (default: random)")
    group.addoption("--kimi-fixed-config", action="store_true", help="do not vary the configuration")
    group.addoption("--kimi-max-side", type=int, default=None, metavar="PX",
                    help="longest side drawn (default: the fuzzer's, as in `kimi-oracle fuzz`)")
    group.addoption("--kimi-out", default="kimi-oracle-out", metavar="DIR", help="findings directory")
    group.addoption("--kimi-case-timeout", default=DEFAULT_CASE_TIMEOUT, metavar="DURATION",
                    help="longest one call of the candidate may take (it runs in its own process; "
                         f"default {DEFAULT_CASE_TIMEOUT})")
    group.addoption("--kimi-memory-limit", type=int, default=None, metavar="MB",
                    help="address space the candidate's process may add (default: no limit)")


def _options(config: pytest.Config) -> dict[str, Any]:
    return {name: config.getoption(f"kimi_{name}") for name in
            ("candidate", "examples", "budget", "profile", "config", "tolerance", "seed", "fixed_config",
             "max_side", "out", "case_timeout", "memory_limit")}


class KimiItem(pytest.Item):
    """One check class of the shared fuzz run."""

    def __init__(self, *, check: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.check = check

    def _run(self) -> Any:
        run = self.config.stash.get(_RUN_KEY, None)
        if run is None:
            from kimi_oracle.cli.common import parse_duration, resolve_config
            from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
            from kimi_oracle.inputs.generators import DEFAULT_MAX_SIDE

            opts = _options(self.config)
            cfg = resolve_config(opts["profile"], Path(opts["config"]) if opts["config"] else None)
            out = Path(opts["out"])
            options = FuzzOptions(
                examples=opts["examples"] if not opts["budget"] else None,
                budget_s=parse_duration(opts["budget"]) if opts["budget"] else None,
                seed=opts["seed"], tolerance=opts["tolerance"], vary_config=not opts["fixed_config"],
                max_side=opts["max_side"] or DEFAULT_MAX_SIDE, db_dir=out / "hypothesis-db",
            )
            run = fuzz(self.config.stash[_CANDIDATE_KEY], cfg, options, out_dir=out)
            self.config.stash[_RUN_KEY] = run
        return run

    def runtest(self) -> None:
        run = self._run()
        mine = [f for f in run.findings if f.check == self.check]
        if mine:
            raise KimiFinding(mine, run)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, KimiFinding):
            from kimi_oracle.results.report import finding_lines

            blocks = []
            for f in excinfo.value.findings:
                lines = finding_lines(f)
                if f.path is not None:
                    lines += [f"finding: {f.path}", f"reproduce: kimi-oracle repro {f.path}"]
                blocks.append("\n".join(lines))
            run = excinfo.value.run
            head = (f"kimi-oracle: {self.check} failed for candidate {run.candidate} "
                    f"({run.examples} examples, seed {run.seed})")
            return head + "\n\n" + "\n\n".join(blocks)
        return str(excinfo.getrepr(style="short"))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return Path("kimi-oracle"), None, f"kimi-oracle::{self.check}"


class KimiFinding(AssertionError):
    """Raised by a KimiItem whose check has findings."""

    def __init__(self, findings: list[Any], run: Any):
        super().__init__(findings[0].message)
        self.findings = findings
        self.run = run


_CANDIDATE_KEY = pytest.StashKey[Any]()


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Append one item per check class when `--kimi-candidate` is given."""
    spec = config.getoption("kimi_candidate")
    if not spec:
        return
    import click

    from kimi_oracle.core.errors import KimiOracleError
    from kimi_oracle.oracle.checks import FINDING_KINDS

    try:
        from kimi_oracle.cli.common import open_candidate, parse_duration, resolve_config
        from kimi_oracle.oracle.checks import Tolerance

        opts = _options(config)
        resolve_config(opts["profile"], Path(opts["config"]) if opts["config"] else None)
        Tolerance.parse(opts["tolerance"])
        # The candidate runs in its own process: its crash, exit or hang is a finding, never the
        # end of the user's test session.
        candidate = open_candidate(spec, parse_duration(opts["case_timeout"]), opts["memory_limit"])
        config.stash[_CANDIDATE_KEY] = candidate
        config.add_cleanup(candidate.close)
    except (KimiOracleError, click.BadParameter) as exc:
        raise pytest.UsageError(f"kimi-oracle: {exc}") from None
    for check in FINDING_KINDS:
        items.append(KimiItem.from_parent(session, name=f"kimi-oracle::{check}", check=check))
