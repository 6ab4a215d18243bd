import dataclasses
import json

import pytest

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.errors import ConfigError

# The checkpoint's media_proc_cfg values as the spec's table (§1) lists them.
K3_JSON = {
    "patch_size": 14,
    "merge_kernel_size": 2,
    "in_patch_limit": 65536,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "transparent_bg_config": {
        "pattern": "chessboard",
        "chessboard_square_size": 8,
        "chessboard_square_on_top_left": True,
        "chessboard_white_value": 255,
        "chessboard_gray_value": 180,
    },
    "transparent_bg_fill_stage": "after_resize",
}
K25_JSON = {
    "patch_size": 14,
    "merge_kernel_size": [2, 2],
    "in_patch_limit": 16384,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    # the video keys: preprocessing-spec section 7's table (K2.5 values)
    "in_patch_limit_each_frame": 4096,
    "in_patch_limit_video": None,
    "sample_fps": 2.0,
    "max_num_frames_each_video": None,
    "temporal_merge_kernel_size": 4,
    "timestamp_mode": "hh:mm:ss.fff",
    "fixed_output_tokens_each_frame": None,
}


def test_profiles_match_spec_table():
    assert PreprocessConfig.from_hf_json(K3_JSON) == PreprocessConfig.k3()
    assert PreprocessConfig.from_hf_json(K25_JSON) == PreprocessConfig.k25()
    assert PreprocessConfig.k25().transparent_bg_config is None
    assert PreprocessConfig.k25().fill_stage == "before_resize"
    assert PreprocessConfig.k3().fill_stage == "after_resize"
    assert PreprocessConfig.k3().factor == 28


def test_from_hf_json_file_under_media_proc_cfg(tmp_path):
    path = tmp_path / "preprocessor_config.json"
    path.write_text(json.dumps({"processor_class": "X", "media_proc_cfg": K3_JSON}))
    assert PreprocessConfig.from_hf_json(path) == PreprocessConfig.k3()
    path.write_text(json.dumps(K3_JSON))
    assert PreprocessConfig.from_hf_json(str(path)) == PreprocessConfig.k3()


@pytest.mark.parametrize("profile", ["k3", "k25", "k3-small"])
def test_round_trip(profile):
    cfg = PreprocessConfig.profile(profile)
    as_json = cfg.to_hf_json()
    assert json.loads(json.dumps(as_json)) == as_json
    assert PreprocessConfig.from_hf_json(as_json) == cfg


def test_k25_json_round_trip_keeps_keys_absent():
    out = PreprocessConfig.from_hf_json(K25_JSON).to_hf_json()
    assert "transparent_bg_config" not in out and "transparent_bg_fill_stage" not in out
    assert out["merge_kernel_size"] == 2


def test_background_defaults_are_checkpoints():
    bg = PreprocessConfig.from_hf_json({**K25_JSON, "transparent_bg_config": {}}).transparent_bg_config
    assert bg == TransparentBgConfig("black", 16, True, 255, 200)
    cfg = PreprocessConfig.from_hf_json({**K25_JSON, "transparent_bg_config": {"pattern": "white"}})
    assert cfg.fill_stage == "before_resize"


def test_replace_for_overrides():
    cfg = dataclasses.replace(PreprocessConfig.k3(), in_patch_limit=100)
    assert cfg.in_patch_limit == 100 and cfg.patch_size == 14
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.patch_size = 3  # type: ignore[misc]


@pytest.mark.parametrize("key", ["patch_size", "merge_kernel_size", "in_patch_limit",
                                 "patch_limit_on_one_side", "fixed_output_tokens", "image_mean", "image_std"])
def test_missing_required_key_names_it(key):
    data = dict(K3_JSON)
    del data[key]
    with pytest.raises(ConfigError) as info:
        PreprocessConfig.from_hf_json(data)
    assert info.value.key == key and key in str(info.value)


@pytest.mark.parametrize(
    "patch, key",
    [
        ({"patch_size": 0}, "patch_size"),
        ({"patch_size": -14}, "patch_size"),
        ({"patch_size": "14"}, "patch_size"),
        ({"patch_size": 14.0}, "patch_size"),
        ({"image_std": [0.5, 0.0, 0.5]}, "image_std"),
        ({"image_mean": [0.5, 0.5]}, "image_mean"),
        ({"image_mean": "0.5"}, "image_mean"),
        ({"in_patch_limit": True}, "in_patch_limit"),
        ({"merge_kernel_size": [2, 3]}, "merge_kernel_size"),
        ({"fixed_output_tokens": "many"}, "fixed_output_tokens"),
        ({"transparent_bg_fill_stage": "during_resize"}, "transparent_bg_fill_stage"),
        ({"transparent_bg_config": {"pattern": "plaid"}}, "transparent_bg_config.pattern"),
        ({"transparent_bg_config": {"chessboard_square_size": 0}}, "transparent_bg_config.chessboard_square_size"),
        ({"transparent_bg_config": {"chessboard_white_value": 256}}, "transparent_bg_config.chessboard_white_value"),
        ({"transparent_bg_config": "chessboard"}, "transparent_bg_config"),
    ],
)
def test_bad_values_raise_config_error_naming_key(patch, key):
    with pytest.raises(ConfigError) as info:
        PreprocessConfig.from_hf_json({**K3_JSON, **patch})
    assert info.value.key == key


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        PreprocessConfig.from_hf_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        PreprocessConfig.from_hf_json(bad)
    with pytest.raises(ConfigError, match="unknown profile"):
        PreprocessConfig.profile("k9")


def test_video_keys_k25_has_them_k3_has_none():
    k3, k25 = PreprocessConfig.k3(), PreprocessConfig.k25()
    assert k25.has_video and not k3.has_video
    assert (k25.sample_fps, k25.temporal_merge_kernel_size, k25.timestamp_mode) == (2.0, 4, "hh:mm:ss.fff")
    assert PreprocessConfig.from_hf_json(k25.to_hf_json()) == k25
    # the image keys alone make image ids: K2.5's stay those of its image-only JSON
    assert k25.image_hf_json() == {k: v for k, v in K25_JSON.items() if k in K3_JSON} | {"merge_kernel_size": 2}
    # K3 with the K2.5 rules, explicitly (--video-rules k25); its image keys are K3's
    k3v = k3.with_video_rules("k25")
    assert k3v.has_video and k3v.in_patch_limit_each_frame == 4096 and k3v.image_hf_json() == k3.to_hf_json()
    assert PreprocessConfig.from_hf_json({**K3_JSON, "timestamp_mode": "mm:ss"}).timestamp_mode == "mm:ss"


@pytest.mark.parametrize("key,value", [("timestamp_mode", "ss.fff"), ("sample_fps", 0), ("sample_fps", "2"),
                                       ("temporal_merge_kernel_size", 0), ("in_patch_limit_video", 2.5),
                                       ("fixed_output_tokens_each_frame", True)])
def test_bad_video_keys_are_config_errors(key, value):
    with pytest.raises(ConfigError) as err:
        PreprocessConfig.from_hf_json({**K25_JSON, key: value})
    assert err.value.key == key
