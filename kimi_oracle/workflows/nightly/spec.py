"""What a worker is given and what it reports: its spec file and its status file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.files import write_json


class _Status:
    def __init__(self, path: Path, engine: str):
        self.path = path
        self.data: dict[str, Any] = {"engine": engine, "examples": 0, "findings": [], "error": None, "stopped": None}
        self._last = 0.0

    def write(self, force: bool = False) -> None:
        if force or time.monotonic() - self._last > 1.0:
            self._last = time.monotonic()
            write_json(self.path, self.data)


def _base_config(spec: dict[str, Any]) -> PreprocessConfig:
    return PreprocessConfig.resolve(spec.get("profile"), spec.get("config_path"))
