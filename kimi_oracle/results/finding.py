"""The Finding record: one failure, its stable id and the content of its case.json."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.files import utc_now, versions
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.core.specs import absolute_spec

FINDING_SCHEMA = "kimi-oracle.finding"
FINDING_SCHEMA_VERSION = 1
RUN_SCHEMA = "kimi-oracle.fuzz-run"
RUN_SCHEMA_VERSION = 1


@dataclass
class Finding:
    """One failure, with everything needed to write and reproduce it."""

    check: str
    message: str
    candidate: str
    config: PreprocessConfig
    images: list[Image.Image] = field(default_factory=list, repr=False)
    params: list[dict[str, Any] | None] = field(default_factory=list)
    tolerance: str = "exact"
    engine: str = "hypothesis"
    seed: int | None = None
    example: int | None = None  # how many examples the run had tried when it found this
    stats: dict[str, Any] = field(default_factory=dict)
    sources: list[str | None] = field(default_factory=list)  # original file names (check command)
    raw_inputs: list[bytes | None] = field(default_factory=list, repr=False)  # original bytes
    expected: PreprocessResult | None = field(default=None, repr=False)
    actual: PreprocessResult | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)
    # Diagnosis (oracle.diagnosis.finding_diagnosis): root-cause ids ([] for non-pixel checks) and
    # levels over the values that differ; the residual is what the root causes leave unexplained.
    root_causes: list[str] = field(default_factory=list)
    max_levels: float | None = 0.0
    mean_levels: float | None = 0.0
    residual_max_levels: float | None = 0.0
    residual_mean_levels: float | None = 0.0
    attribution: dict[str, Any] | None = None
    key: str = ""  # oracle.grouping.finding_key of the failure (the finding's identity in a run)
    hits: int = 1  # examples of the run that failed with this key (shrinking not counted)
    max_levels_seen: float | None = None  # the largest difference seen for this key over the run
    path: Path | None = None
    written_here: bool = False  # set by write_finding: True when that call created the folder
    created: str = field(default_factory=utc_now)

    @property
    def kind(self) -> str:
        """The finding class used in summaries (equal to the failed check)."""
        return self.check

    @property
    def id(self) -> str:
        """Stable id: check plus a digest of what was run (config, inputs, candidate, policy).

        A finding without images (an input that killed a harness before it became one) is named
        by its raw input bytes, so that different inputs never share an id."""
        h = hashlib.sha256()
        h.update(json.dumps([self.check, self.candidate, self.tolerance, self.config.to_hf_json()],
                            sort_keys=True, default=str).encode())
        for i, img in enumerate(self.images):
            params = self.params[i] if i < len(self.params) else None
            if params is not None:
                h.update(json.dumps(params, sort_keys=True).encode())
            else:
                h.update(f"{img.mode}{img.size}".encode())
                h.update(hashlib.sha256(img.tobytes()).digest())
        if not self.images:
            for raw in self.raw_inputs:
                if raw is not None:
                    h.update(hashlib.sha256(raw).digest())
        if "invariance" in self.extra:
            h.update(json.dumps(self.extra["invariance"], sort_keys=True).encode())
        if self.extra.get("after"):  # (a peeled group's: the same case judged against another reference)
            h.update(json.dumps(self.extra["after"]).encode())
        return f"{self.check}-{h.hexdigest()[:12]}"

    def case_dict(self, files: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """The content of case.json."""
        images = []
        for i, img in enumerate(self.images):
            entry: dict[str, Any] = {"index": i, "mode": img.mode, "size": list(img.size)}
            if "transparency" in img.info:
                entry["transparency"] = img.info["transparency"].hex() if isinstance(
                    img.info["transparency"], bytes) else img.info["transparency"]
            entry["params"] = self.params[i] if i < len(self.params) else None
            entry["source"] = self.sources[i] if i < len(self.sources) else None
            if i < len(files):
                entry.update(files[i])
            images.append(entry)
        out = {
            "schema": FINDING_SCHEMA,
            "schema_version": FINDING_SCHEMA_VERSION,
            "id": self.id,
            "check": self.check,
            "kind": self.kind,
            "message": self.message,
            "engine": self.engine,
            # (a file spec made absolute: a replay from anywhere loads what this run loaded)
            "candidate": absolute_spec(self.candidate) if self.candidate else self.candidate,
            "tolerance": self.tolerance,
            "profile": self.config.name,
            "config": self.config.to_hf_json(),
            "seed": self.seed,
            "example": self.example,
            "key": self.key,
            "hits": self.hits,
            "max_levels_seen": self.max_levels_seen if self.max_levels_seen is not None else self.max_levels,
            "root_causes": list(self.root_causes),
            "max_levels": self.max_levels,
            "mean_levels": self.mean_levels,
            "residual_max_levels": self.residual_max_levels,
            "residual_mean_levels": self.residual_mean_levels,
            "attribution": self.attribution,
            "images": images,
            "created": self.created,
            "versions": versions(),
        }
        out.update(self.extra)
        return out
