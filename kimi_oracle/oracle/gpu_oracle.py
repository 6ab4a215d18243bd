"""`--oracle gpu`: the expected outputs from the project's own GPU pipeline, checked by the reference.

On a GPU machine the CPU reference is the whole cost of a fuzz run with a GPU candidate. With
`--oracle gpu` the expected result of each example comes from `pipelines.gpu` (bit-identical to
the reference by construction and by test), while the CPU reference recomputes

- a sample of the examples (`--oracle-check-share`, default 5 %, drawn from the run's seed), and
- every example whose verdict is a failure, before that failure becomes a finding.

When the reference and the GPU pipeline disagree (other bytes or grids, one of them refusing an
input the other takes, or the GPU pipeline raising), that is recorded as a finding of its own
against the project (`ORACLE_DISAGREEMENT`, `oracle_disagreement`), the reference's result is the
expected one for that example, and the run falls back to the reference for the rest of it: a
candidate is never judged against an oracle that was caught wrong.

The seed of the sample is the run's (`--seed`; 0 when none is given). `GpuOracle(device=...)` runs the
pipeline on CUDA (the CLI refuses `--oracle gpu` without a CUDA
device, exit 2); the tests run it on the CPU through Triton's interpreter with small tiles.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import BackendError, InputError
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.kinds import ORACLE_DISAGREEMENT

ORACLE_REFERENCE, ORACLE_GPU = "reference", "gpu"
ORACLES = (ORACLE_REFERENCE, ORACLE_GPU)
DEFAULT_CHECK_SHARE = 0.05
PROJECT = "gpu"  # the candidate an oracle_disagreement finding is against (its repro: gpu vs reference)


# `confirm`'s answer when the reference refuses the input the GPU pipeline took: judge the example
# again with no expected result (the reference runs, and its refusal is judged as such).
REFUSED = object()
_UNCHECKED = "_kimi_gpu_unchecked"  # set on a served result until the reference has seen it


@dataclass
class Disagreement:
    """The GPU pipeline and the reference on one example: what differed."""

    images: list[Image.Image]
    config: PreprocessConfig
    message: str
    why: str  # "sample" (a checked example), "finding" (a failure confirmed), "raised" (the pipeline raised)
    gpu: PreprocessResult | None = None
    reference: PreprocessResult | None = None
    example: int | None = None  # the run's example number (set by the search)


def _copies(images: Sequence[Image.Image]) -> list[Image.Image]:
    return [img.copy() for img in images]


def differences(gpu: PreprocessResult, ref: PreprocessResult) -> str | None:
    """None when the two results are the same bytes and grids, else what differs."""
    if not torch.equal(torch.as_tensor(gpu.grid_thws).cpu(), torch.as_tensor(ref.grid_thws)):
        return f"grids {torch.as_tensor(gpu.grid_thws).tolist()} != the reference's {torch.as_tensor(ref.grid_thws).tolist()}"
    a, b = gpu.pixel_values.detach().cpu(), ref.pixel_values
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"pixel_values {list(a.shape)} {a.dtype} != the reference's {list(b.shape)} {b.dtype}"
    if torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32)):
        return None
    differing = int((a != b).sum())
    return (f"{differing} of {a.numel()} values differ from the reference's (max |diff| "
            f"{float((a - b).abs().max()):.6g})")


@dataclass
class GpuOracle:
    """Expected results from the GPU pipeline, a share of them and every failure re-checked."""

    check_share: float = DEFAULT_CHECK_SHARE
    seed: int = 0
    device: str = "cuda"
    tiles: Any = None
    pipeline: Callable[..., PreprocessResult] | None = None  # default: pipelines.gpu.preprocess
    reference: Callable[..., PreprocessResult] | None = None  # default: pipelines.reference.preprocess
    fallen_back: bool = False
    served: int = 0  # examples whose expected result came from the GPU pipeline
    checked: int = 0  # of those, recomputed by the reference (the sample and the failures)
    disagreements: list[Disagreement] = field(default_factory=list)
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.check_share <= 1.0:
            raise InputError(f"--oracle-check-share must be within [0, 1], got {self.check_share}")
        self._rng = random.Random(self.seed)

    def _gpu(self, images: Sequence[Image.Image], config: PreprocessConfig) -> PreprocessResult:
        if self.pipeline is None:
            from kimi_oracle.pipelines.gpu import preprocess as gpu_preprocess

            self.pipeline = gpu_preprocess
        out = self.pipeline(_copies(images), config, device=self.device, tiles=self.tiles)
        return PreprocessResult(out.pixel_values.detach().cpu(), torch.as_tensor(out.grid_thws).cpu())

    def _reference(self, images: Sequence[Image.Image], config: PreprocessConfig) -> PreprocessResult:
        if self.reference is None:
            from kimi_oracle.pipelines.reference import preprocess as ref_preprocess

            self.reference = ref_preprocess
        return self.reference(_copies(images), config)

    def expected(self, images: Sequence[Image.Image], config: PreprocessConfig,
                 steps: Any = None) -> PreprocessResult | None:
        """The expected result of one example, or None: the reference computes it (the run fell
        back, the reference's steps carry assumed variants, or the input is one to refuse)."""
        from kimi_oracle.pipelines.reference import CHECKPOINT

        if self.fallen_back or (steps is not None and steps != CHECKPOINT):
            return None
        try:
            got = self._gpu(images, config)
        except (InputError, BackendError) as exc:
            if isinstance(exc, BackendError):
                raise  # (no CUDA, or kernels interpreted: a harness error, not the pipeline's answer)
            return None  # (the reference decides what is refused: it runs, and judges that)
        except Exception as exc:  # noqa: BLE001 - the project's pipeline failing is a finding against it
            self._disagree(images, config, f"the GPU pipeline raised {type(exc).__name__}: {exc}", "raised")
            return None
        self.served += 1
        if self._rng.random() < self.check_share:
            checked = self._checked(images, config, got, "sample")
            return None if checked is REFUSED else checked
        setattr(got, _UNCHECKED, True)
        return got

    def confirm(self, images: Sequence[Image.Image], config: PreprocessConfig, expected: Any) -> Any:
        """Before a failure judged against `expected` is reported: None when `expected` was the
        reference's (or already checked) or the reference agrees with it; else the reference's
        result to judge the example again, or `REFUSED` when the reference refuses the input (judge
        it again with no expected result); the GPU pipeline disagreed: recorded, fallen back."""
        if expected is None or not getattr(expected, _UNCHECKED, False):
            return None
        setattr(expected, _UNCHECKED, False)
        checked = self._checked(images, config, expected, "finding")
        return None if checked is expected else checked

    def _checked(self, images: Sequence[Image.Image], config: PreprocessConfig, got: PreprocessResult,
                 why: str) -> Any:
        self.checked += 1
        try:
            ref = self._reference(images, config)
        except InputError as exc:
            self._disagree(images, config, f"the GPU pipeline took an input the reference refuses ({exc})", why, got)
            return REFUSED
        diff = differences(got, ref)
        if diff is None:
            return got
        self._disagree(images, config, diff, why, got, ref)
        return ref

    def _disagree(self, images: Sequence[Image.Image], config: PreprocessConfig, message: str, why: str,
                  got: PreprocessResult | None = None, ref: PreprocessResult | None = None) -> None:
        self.disagreements.append(Disagreement(_copies(images), config, message, why, got, ref))
        self.fallen_back = True

    def summary(self) -> dict[str, Any]:
        """For the run's JSON: the oracle, its sample share, what it served and checked."""
        return {"oracle": ORACLE_GPU, "device": self.device, "check_share": self.check_share,
                "served": self.served, "checked": self.checked, "disagreements": len(self.disagreements),
                "fell_back": self.fallen_back}


__all__ = ["DEFAULT_CHECK_SHARE", "ORACLES", "ORACLE_DISAGREEMENT", "ORACLE_GPU", "ORACLE_REFERENCE", "PROJECT", "REFUSED",
           "Disagreement", "GpuOracle", "differences"]
