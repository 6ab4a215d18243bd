"""The change from OLD's output to NEW's: named by one step, located, and folded into the gate's rows.

OLD here is the reference with a catalogued resampler swapped in (a baseline with a defect of
its own); each NEW is OLD's output edited by hand (a pad overwritten, patches reordered) or OLD's
steps with one more variant, so the expected name comes from the construction.
"""

from __future__ import annotations

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.inputs.configs import vary_config
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.diagnosis import attribute
from kimi_oracle.oracle.diagnosis.catalogue import steps_for
from kimi_oracle.oracle.diagnosis.change import diagnose_change
from kimi_oracle.pipelines import reference
from kimi_oracle.workflows.gate.changes import named_by_change
from kimi_oracle.workflows.known import Margin, aggregate, compare_rows

CONFIG = vary_config(PreprocessConfig.k3(), in_patch_limit=6)  # 61x45 resamples to 43x31
OLD_VARIANTS = [("resample-float", "uint8-aa")]


def _run(img, variants) -> PreprocessResult:
    p = plan(img.width, img.height, CONFIG)
    steps = steps_for(CONFIG, variants)
    return PreprocessResult(steps.patches(steps.resized_rgb(img, CONFIG, p), CONFIG, p),
                            torch.tensor([p.grid_thw]))


def _old(img):
    old = _run(img, OLD_VARIANTS)
    return old, attribute([img], CONFIG, old).to_dict()


def test_a_pad_one_level_brighter_is_named_with_its_level():
    img = make_image(CaseParams(61, 45, "RGB", seed=4))
    old, old_att = _old(img)
    p = plan(img.width, img.height, CONFIG)
    _, gh, gw = p.grid_thw
    ps = CONFIG.patch_size
    laid = old.pixel_values.view(gh, gw, 3, ps, ps).permute(0, 3, 1, 4, 2).reshape(gh * ps, gw * ps, 3).clone()
    level1 = torch.from_numpy(reference.normalization_lut(CONFIG)[:, 1].copy())
    laid[p.new_h:, :] = level1
    laid[:, p.new_w:] = level1
    new = laid.view(gh, ps, gw, ps, 3).permute(0, 2, 4, 1, 3).reshape(gh * gw, 3, ps, ps).contiguous()
    change = diagnose_change([img], CONFIG, PreprocessResult(new, old.grid_thws), old, old_attribution=old_att)
    assert change["name"] == "pad/level-1" and change["exact"] and change["tier"] == "outputs"
    assert change["where"]["confined_to"] == ["pad"]
    assert abs(change["levels"]["max"] - 1.0) < 1e-3


def test_patches_in_another_order_are_named_by_the_order():
    img = make_image(CaseParams(61, 45, "RGB", seed=4))
    old, old_att = _old(img)
    n = old.pixel_values.shape[0]
    pi = list(range(n))[::-1]
    change = diagnose_change([img], CONFIG, PreprocessResult(old.pixel_values[pi].contiguous(), old.grid_thws), old,
                             old_attribution=old_att)
    assert change["family"] == "patch-order" and change["exact"]
    # (patches of the padding alone are equal: any of their orders is the same output)
    fitted = [int(k) for k in change["variant"].removeprefix("permuted-").split(",")]
    assert torch.equal(old.pixel_values[fitted], old.pixel_values[pi])


def test_another_step_on_top_of_olds_is_found_from_olds_inferred_pipeline():
    img = make_image(CaseParams(61, 45, "RGBA", "random", seed=1))
    old, old_att = _old(img)
    assert old_att["variants"] == ["resample-float/uint8-aa"]
    new = _run(img, OLD_VARIANTS + [("alpha-straight", "straight-alpha")])
    change = diagnose_change([img], CONFIG, new, old, old_attribution=old_att)
    assert change["name"] == "alpha-straight/straight-alpha" and change["exact"] and change["tier"] == "steps"
    assert change["families"] == ["alpha-straight"]
    # the same outputs: no change
    assert diagnose_change([img], CONFIG, old, old, old_attribution=old_att) is None


def _obs(input_id, causes, levels, **extra):
    explained = [{"root_cause": c, "variant": "v", "image": 0, "residual_max_levels": 0.0,
                  "residual_mean_levels": 0.0} for c in causes]
    return {"input": input_id, "stage": "fuzz", "check": "pixel_mismatch", "key": "pixel_mismatch{RGB}",
            "message": "", "root_causes": list(causes), "max_levels": levels, "mean_levels": levels / 2,
            "share": 0.5, "attribution": {"explained": explained, "max_levels": levels, "mean_levels": levels / 2},
            **extra}


def test_rows_name_the_change_and_keep_olds_causes_as_they_were():
    # OLD: 40 levels of resample-float on two inputs; NEW: the same plus a pad one level brighter,
    # which NEW's own attribution splits among three other causes
    old = [_obs("a", ["resample-float"], 40.0), _obs("b", ["resample-float"], 40.0)]
    change = {"family": "pad", "variant": "level-1", "name": "pad/level-1", "families": ["pad"], "exact": True,
              "levels": {"max": 1.0, "mean": 1.0}, "where": {"summary": "pad only", "confined_to": ["pad"]}}
    new = [_obs(i, ["resample-float", "fill-stage", "unexplained"], 41.0, change=change) for i in ("a", "b")]
    rows = compare_rows(aggregate(named_by_change(new, old)), aggregate(old), Margin())
    failing = [r for r in rows if r["fails"]]
    assert [(r["root_cause"], r["verdict"]) for r in failing] == [("pad", "new")]
    assert failing[0]["change"]["family"] == "pad" and failing[0]["change"]["variant"] == "level-1"
    assert failing[0]["new"]["max_levels"] == 1.0 and failing[0]["change"]["inputs"] == 2
    shared = next(r for r in rows if r["root_cause"] == "resample-float")
    assert shared["verdict"] == "known" and shared["new"]["max_levels"] == 40.0
    # without the change, NEW's own rows: the three families
    own = compare_rows(aggregate(new), aggregate(old), Margin())
    assert {"fill-stage", "unexplained"} <= {r["root_cause"] for r in own} and "pad" not in {
        r["root_cause"] for r in own}
    assert not np.isnan(failing[0]["new"]["mean_levels"])
