"""Preprocessing configuration: the checkpoint's `media_proc_cfg` keys, profiles and JSON I/O."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kimi_oracle.core.errors import ConfigError, InputError
from kimi_oracle.core.files import load_json  # the one reader of user files

PATTERNS = ("white", "black", "gray", "chessboard")
FILL_STAGES = ("before_resize", "after_resize")
# The processor's default when `transparent_bg_fill_stage` is absent.
DEFAULT_FILL_STAGE = "before_resize"
PROFILES = ("k3", "k25", "k3-small", "k3-p16m1")
# The K2.5 checkpoint's video keys of `media_proc_cfg` (None: absent; K3's processor is image-only).
VIDEO_KEYS = (
    "sample_fps",
    "temporal_merge_kernel_size",
    "timestamp_mode",
    "in_patch_limit_each_frame",
    "in_patch_limit_video",
    "max_num_frames_each_video",
    "fixed_output_tokens_each_frame",
)
TIMESTAMP_MODES = ("hh:mm:ss.fff", "mm:ss.fff", "mm:ss")
# The K2.5 checkpoint's values (its preprocessor_config.json; docs/video.md).
K25_VIDEO = {"sample_fps": 2.0, "temporal_merge_kernel_size": 4, "timestamp_mode": "hh:mm:ss.fff",
             "in_patch_limit_each_frame": 4096, "in_patch_limit_video": None, "max_num_frames_each_video": None,
             "fixed_output_tokens_each_frame": None}
DEFAULT_PROFILE = "k3"

REQUIRED_KEYS = (
    "patch_size",
    "merge_kernel_size",
    "in_patch_limit",
    "patch_limit_on_one_side",
    "fixed_output_tokens",
    "image_mean",
    "image_std",
)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class TransparentBgConfig:
    """Background for transparent pixels; field names and defaults are the checkpoint's."""

    pattern: str = "black"
    chessboard_square_size: int = 16
    chessboard_square_on_top_left: bool = True
    chessboard_white_value: int = 255
    chessboard_gray_value: int = 200

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or self.pattern not in PATTERNS:
            raise ConfigError(
                "transparent_bg_config.pattern",
                f"unknown pattern {self.pattern!r}; expected one of {', '.join(PATTERNS)}",
            )
        if not _is_int(self.chessboard_square_size) or self.chessboard_square_size <= 0:
            raise ConfigError(
                "transparent_bg_config.chessboard_square_size",
                f"must be a positive integer, got {self.chessboard_square_size!r}",
            )
        if not isinstance(self.chessboard_square_on_top_left, bool):
            raise ConfigError(
                "transparent_bg_config.chessboard_square_on_top_left",
                f"must be a boolean, got {self.chessboard_square_on_top_left!r}",
            )
        for key in ("chessboard_white_value", "chessboard_gray_value"):
            value = getattr(self, key)
            if not _is_int(value) or not 0 <= value <= 255:
                raise ConfigError(
                    f"transparent_bg_config.{key}", f"must be an integer 0..255, got {value!r}"
                )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TransparentBgConfig":
        """Build from the checkpoint's dict; missing keys take the dataclass defaults."""
        if not isinstance(data, Mapping):
            raise ConfigError("transparent_bg_config", f"must be an object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"transparent_bg_config.{unknown[0]}", "unknown key")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's dict form."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PreprocessConfig:
    """The checkpoint's `media_proc_cfg`, validated; use `dataclasses.replace` for overrides."""

    patch_size: int
    merge_kernel_size: int
    in_patch_limit: int
    patch_limit_on_one_side: int
    fixed_output_tokens: int | None
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    transparent_bg_config: TransparentBgConfig | None = None
    # None means "absent from the checkpoint's JSON"; `fill_stage` gives the effective value.
    transparent_bg_fill_stage: str | None = None
    # The video keys (`VIDEO_KEYS`), None where absent: K2.5 has them, K3 none (docs/video.md).
    sample_fps: float | None = None
    temporal_merge_kernel_size: int | None = None
    timestamp_mode: str | None = None
    in_patch_limit_each_frame: int | None = None
    in_patch_limit_video: int | None = None
    max_num_frames_each_video: int | None = None
    fixed_output_tokens_each_frame: int | None = None
    name: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        for key in ("patch_size", "in_patch_limit", "patch_limit_on_one_side"):
            value = getattr(self, key)
            if not _is_int(value):
                raise ConfigError(key, f"must be an integer, got {value!r}")
            if value <= 0:
                raise ConfigError(key, f"must be > 0, got {value}")
        merge = self.merge_kernel_size
        # Our own leniency: the checkpoint only takes an int, but configs sometimes store [2, 2].
        if isinstance(merge, (list, tuple)):
            if len(merge) != 2 or merge[0] != merge[1] or not all(_is_int(m) for m in merge):
                raise ConfigError("merge_kernel_size", f"must be an int or [m, m], got {merge!r}")
            object.__setattr__(self, "merge_kernel_size", int(merge[0]))
            merge = self.merge_kernel_size
        if not _is_int(merge):
            raise ConfigError("merge_kernel_size", f"must be an integer, got {merge!r}")
        if merge <= 0:
            raise ConfigError("merge_kernel_size", f"must be > 0, got {merge}")
        fixed = self.fixed_output_tokens
        if fixed is not None and (not _is_int(fixed) or fixed <= 0):
            raise ConfigError("fixed_output_tokens", f"must be null or a positive integer, got {fixed!r}")
        for key in ("image_mean", "image_std"):
            value = getattr(self, key)
            if not isinstance(value, (list, tuple)) or len(value) != 3:
                raise ConfigError(key, f"must be a list of 3 numbers, got {value!r}")
            if not all(_is_number(v) and math.isfinite(v) for v in value):
                raise ConfigError(key, f"must hold finite numbers, got {value!r}")
            object.__setattr__(self, key, tuple(float(v) for v in value))
        if any(v == 0 for v in self.image_std):
            raise ConfigError("image_std", f"must not contain 0, got {list(self.image_std)!r}")
        bg = self.transparent_bg_config
        if isinstance(bg, Mapping):
            object.__setattr__(self, "transparent_bg_config", TransparentBgConfig.from_dict(bg))
        elif bg is not None and not isinstance(bg, TransparentBgConfig):
            raise ConfigError("transparent_bg_config", f"must be an object or null, got {bg!r}")
        stage = self.transparent_bg_fill_stage
        if stage is not None and (not isinstance(stage, str) or stage not in FILL_STAGES):
            raise ConfigError(
                "transparent_bg_fill_stage",
                f"unknown fill stage {stage!r}; expected one of {', '.join(FILL_STAGES)}",
            )

        _check_video_keys(self)

    @property
    def has_video(self) -> bool:
        """Whether the config carries the video rules (sampling rate, chunk size, timestamps)."""
        return None not in (self.sample_fps, self.temporal_merge_kernel_size, self.timestamp_mode)

    def with_video_rules(self, rules: str = "k25") -> "PreprocessConfig":
        """This config with the K2.5 checkpoint's video keys (`--video-rules k25`): what engines
        apply to K3, whose own processor is image-only. Keys the config already has are kept."""
        if rules != "k25":
            raise ConfigError("--video-rules", f"unknown video rules {rules!r}; expected k25")
        keys = {k: v for k, v in K25_VIDEO.items() if getattr(self, k) is None}
        return dataclasses.replace(self, **keys, name=self.name if self.has_video else f"{self.name}+k25-video")

    def video_hf_json(self) -> dict[str, Any]:
        """The video keys the config has (None-valued ones left out)."""
        return {k: getattr(self, k) for k in VIDEO_KEYS if getattr(self, k) is not None}

    @property
    def fill_stage(self) -> str:
        """The effective fill stage (the processor's default when the key is absent)."""
        return self.transparent_bg_fill_stage or DEFAULT_FILL_STAGE

    @property
    def factor(self) -> int:
        """Merge × patch: the pixel multiple every padded side is rounded up to."""
        return self.merge_kernel_size * self.patch_size

    @classmethod
    def k3(cls) -> "PreprocessConfig":
        """The Kimi-K3 checkpoint's configuration."""
        return cls(
            patch_size=14,
            merge_kernel_size=2,
            in_patch_limit=65536,
            patch_limit_on_one_side=512,
            fixed_output_tokens=None,
            image_mean=(0.5, 0.5, 0.5),
            image_std=(0.5, 0.5, 0.5),
            transparent_bg_config=TransparentBgConfig(
                pattern="chessboard",
                chessboard_square_size=8,
                chessboard_square_on_top_left=True,
                chessboard_white_value=255,
                chessboard_gray_value=180,
            ),
            transparent_bg_fill_stage="after_resize",
            name="k3",
        )

    @classmethod
    def k25(cls) -> "PreprocessConfig":
        """The Kimi-K2.5 checkpoint's configuration (no background: RGB before resize).

        K3's patch, merge, side limit and mean/std with a quarter of its patch budget."""
        return dataclasses.replace(cls.k3(), in_patch_limit=16384, transparent_bg_config=None,
                                   transparent_bg_fill_stage=None, name="k25", **K25_VIDEO)

    @classmethod
    def k3_small(cls) -> "PreprocessConfig":
        """K3 with a tiny patch budget (16), so that even small test images are resampled."""
        return dataclasses.replace(cls.k3(), in_patch_limit=16, name="k3-small")

    @classmethod
    def k3_p16m1(cls) -> "PreprocessConfig":
        """K3 with a non-default patch size (16) and merge size (1): padding to multiples of 16 px,
        one token per patch. The side cap is 448 patches, so that the longest side stays K3's
        7168 px (512 x 14 = 448 x 16) and the goldens' side-cap images resample as under k3. Not a
        published checkpoint: a profile on which a kernel that hard-codes 14 or 2 fails."""
        return dataclasses.replace(cls.k3(), patch_size=16, merge_kernel_size=1, patch_limit_on_one_side=448,
                                   name="k3-p16m1")

    @classmethod
    def profile(cls, name: str) -> "PreprocessConfig":
        """A named profile: one of `PROFILES` (k3, k25, k3-small, k3-p16m1)."""
        profiles = {"k3": cls.k3, "k25": cls.k25, "k3-small": cls.k3_small, "k3-p16m1": cls.k3_p16m1}
        try:
            return profiles[name]()
        except KeyError:
            raise ConfigError(
                "profile", f"unknown profile {name!r}; expected one of {', '.join(PROFILES)}"
            ) from None

    @classmethod
    def resolve(cls, profile: str | None = None, config_path: str | Path | None = None) -> "PreprocessConfig":
        """The configuration a command runs under: a checkpoint JSON file, or a named profile
        (default `DEFAULT_PROFILE`); naming both is an error."""
        if profile and config_path:
            raise ConfigError("--config", "give either --profile or --config, not both")
        if config_path:
            return cls.from_hf_json(config_path)
        return cls.profile(profile or DEFAULT_PROFILE)

    @classmethod
    def from_hf_json(cls, source: str | Path | Mapping[str, Any]) -> "PreprocessConfig":
        """Read a `preprocessor_config.json` (path or dict), top level or under `media_proc_cfg`."""
        name = "custom"
        if isinstance(source, (str, Path)):
            path = Path(source)
            try:
                data = load_json(path)
            except InputError as exc:
                raise ConfigError("<file>", f"cannot read {path}: {exc.reason}") from None
            name = path.stem
        elif isinstance(source, Mapping):
            data = source
        else:
            raise ConfigError("<file>", f"expected a path or a dict, got {type(source).__name__}")
        if not isinstance(data, Mapping):
            raise ConfigError("<file>", "the JSON document must be an object")
        if "media_proc_cfg" in data:
            data = data["media_proc_cfg"]
            if not isinstance(data, Mapping):
                raise ConfigError("media_proc_cfg", "must be an object")
        for key in REQUIRED_KEYS:
            if key not in data:
                raise ConfigError(key, "missing (the checkpoint requires it)")
        kwargs = {key: data[key] for key in REQUIRED_KEYS}
        kwargs["transparent_bg_config"] = data.get("transparent_bg_config")
        kwargs["transparent_bg_fill_stage"] = data.get("transparent_bg_fill_stage")
        kwargs.update({key: data[key] for key in VIDEO_KEYS if key in data})
        return cls(**kwargs, name=name)

    def to_hf_json(self) -> dict[str, Any]:
        """The `media_proc_cfg` dict; `from_hf_json(c.to_hf_json()) == c`."""
        out: dict[str, Any] = {
            "patch_size": self.patch_size,
            "merge_kernel_size": self.merge_kernel_size,
            "in_patch_limit": self.in_patch_limit,
            "patch_limit_on_one_side": self.patch_limit_on_one_side,
            "fixed_output_tokens": self.fixed_output_tokens,
            "image_mean": list(self.image_mean),
            "image_std": list(self.image_std),
        }
        if self.transparent_bg_config is not None:
            out["transparent_bg_config"] = self.transparent_bg_config.to_dict()
        if self.transparent_bg_fill_stage is not None:
            out["transparent_bg_fill_stage"] = self.transparent_bg_fill_stage
        out.update(self.video_hf_json())
        return out

    def image_hf_json(self) -> dict[str, Any]:
        """The image keys of `to_hf_json` only: what image ids and golden hashes are made of (a
        video key never changes an image's processing, so K2.5's image ids stay as recorded)."""
        out = self.to_hf_json()
        for key in VIDEO_KEYS:
            out.pop(key, None)
        return out

    def describe(self) -> str:
        """One line for reports."""
        bg = self.transparent_bg_config
        bg_text = "none" if bg is None else bg.pattern
        return (
            f"{self.name}: patch {self.patch_size}, merge {self.merge_kernel_size}, "
            f"limit {self.in_patch_limit}, side {self.patch_limit_on_one_side}, "
            f"bg {bg_text}, fill {self.fill_stage}"
        )


def _check_video_keys(c: PreprocessConfig) -> None:
    """The video keys' types (each may be None: absent)."""
    fps = c.sample_fps
    if fps is not None:
        if not _is_number(fps) or not math.isfinite(fps) or fps <= 0:
            raise ConfigError("sample_fps", f"must be a positive number, got {fps!r}")
        object.__setattr__(c, "sample_fps", float(fps))
    for key in ("temporal_merge_kernel_size", "in_patch_limit_each_frame", "in_patch_limit_video",
                "max_num_frames_each_video", "fixed_output_tokens_each_frame"):
        value = getattr(c, key)
        if value is not None and (not _is_int(value) or value <= 0):
            raise ConfigError(key, f"must be null or a positive integer, got {value!r}")
    mode = c.timestamp_mode
    if mode is not None and mode not in TIMESTAMP_MODES:
        raise ConfigError("timestamp_mode", f"unknown timestamp mode {mode!r}; expected one of "
                          + ", ".join(TIMESTAMP_MODES))
