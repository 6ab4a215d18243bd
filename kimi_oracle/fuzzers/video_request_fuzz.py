"""Fuzzing a video request engine (issue 42, item 6): drawn requests (`inputs.video_requests`) judged by
`oracle.video_request`, findings grouped by check and the steps that reproduce them.

`fuzz --media video|both --engine SPEC` runs it in a forked process (`fuzzers.isolated`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.threads import one_torch_thread
from kimi_oracle.core.tokenizer import Tokenizer
from kimi_oracle.inputs.video_requests import request_cases
from kimi_oracle.oracle.video_request import judge_request


@dataclass
class VideoRequestReport:
    """What a video request fuzz found, grouped."""

    engine: str
    profile: str
    seed: int
    requests: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No finding."""
        return not self.counts

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"engine": self.engine, "profile": self.profile, "seed": self.seed, "requests": self.requests,
                "ok": self.ok, "groups": [{"key": k, "count": n, **self.first[k]} for k, n in self.counts.items()]}

    def lines(self) -> list[str]:
        """The report as text."""
        out = [f"video request engine {self.engine} ({self.profile}, seed {self.seed}): {self.requests} requests, "
               f"{sum(self.counts.values())} fail"]
        for k, n in self.counts.items():
            out.append(f"  {k}: {n} requests; first: {self.first[k]['case']}: {self.first[k]['message']}")
        return out


def fuzz_video_requests(spec: str, base: PreprocessConfig, count: int, seed: int, media: str = "both"
                        ) -> VideoRequestReport:
    """Judge `count` drawn requests on the engine `spec` (loaded as a candidate function is)."""
    from kimi_oracle.oracle.candidates import named_function, resolve

    obj = resolve(spec, "engine")
    engine = named_function(getattr(obj, "serve", obj) if not callable(obj) else obj, "engine", spec, "serve")
    tokenizer = Tokenizer()
    report = VideoRequestReport(spec, base.name, int(seed))
    with one_torch_thread():  # (small tensors: core.threads)
        _judge_all(engine, base, count, seed, media, tokenizer, report)
    return report


def _judge_all(engine: Any, base: PreprocessConfig, count: int, seed: int, media: str, tokenizer: Tokenizer,
               report: "VideoRequestReport") -> None:
    for i, case in enumerate(request_cases(base, count, seed, media)):
        report.requests = i + 1
        verdict = judge_request(engine, case, tokenizer)
        if verdict is None:
            continue
        key = verdict.key()
        report.counts[key] = report.counts.get(key, 0) + 1
        report.first.setdefault(key, {"check": verdict.check, "message": verdict.message, "case": case.describe,
                                      "explained_by": verdict.explained_by, "text": case.text[:400]})


__all__ = ["VideoRequestReport", "fuzz_video_requests"]
