"""The images the reference's speed targets are measured on (issue 33, item 3): its floor
(`tests/benchmarks/test_reference_floor.py`) and the engines' CPU paths
(`tests/benchmarks/test_reference_vs_engines.py`) time the same ones."""

from kimi_oracle.inputs.generators import CaseParams

# name: (image, profile, resampled under the profile, the floor's target ratio)
CASES = {
    "rgb-2048x2048-k3": (CaseParams(2048, 2048, "RGB", content="noise", seed=7), "k3", False, 1.5),
    "rgb-4032x3024-k3": (CaseParams(4032, 3024, "RGB", content="noise", seed=4), "k3", False, 1.5),
    "rgb-4032x3024-k25": (CaseParams(4032, 3024, "RGB", content="noise", seed=4), "k25", True, 1.5),
    "rgba-1920x1080-k3-chessboard": (CaseParams(1920, 1080, "RGBA", "gradient", "noise", seed=3), "k3", False, 2.5),
}
