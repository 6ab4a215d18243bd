"""`diagnosis_holds`: a stored diagnosis is reused only when it is this result's diagnosis."""

from __future__ import annotations

import copy

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.diagnosis import diagnosis_holds, finding_diagnosis, steps_for
from kimi_oracle.oracle.checks import compare
from kimi_oracle.pipelines.reference import preprocess, preprocess_image


def test_a_true_diagnosis_holds_and_a_forged_one_does_not():
    config = PreprocessConfig.profile("k3")
    img = make_image(CaseParams(61, 45, "RGB", content="noise", seed=3))
    # The candidate: the reference with one catalogued variant swapped in (float16 normalization).
    patches, _ = preprocess_image(img, config, steps=steps_for(config, [("normalize-float", "float16")]))
    expected = preprocess([img], config)
    actual = PreprocessResult(patches, expected.grid_thws)
    verdict = compare(expected, actual, config, sizes=[img.size])
    assert not verdict.ok
    fields = finding_diagnosis("pixel_mismatch", verdict.stats, [img], config, expected=verdict.expected,
                               actual=verdict.actual)
    assert "normalize-float" in fields["root_causes"]
    assert diagnosis_holds(fields, [img], config, verdict.actual, verdict.expected, 0)
    for key, value in (("max_levels", 0.4), ("residual_max_levels", 3.0), ("root_causes", ["pad"])):
        forged = copy.deepcopy(fields)
        forged[key] = value
        assert not diagnosis_holds(forged, [img], config, verdict.actual, verdict.expected, 0), key
    forged = copy.deepcopy(fields)
    forged["attribution"]["variants"] = ["normalize-float/bfloat16"]
    assert not diagnosis_holds(forged, [img], config, verdict.actual, verdict.expected, 0)
    # The true variant listed 10,000 times reproduces the bytes too, but no search lists it so (a
    # report carrying the list would be megabytes long).
    forged["attribution"]["variants"] = fields["attribution"]["variants"] * 10_000
    assert not diagnosis_holds(forged, [img], config, verdict.actual, verdict.expected, 0)


def test_an_unexplained_entry_holds_only_with_its_measured_levels():
    config = PreprocessConfig.profile("k3")
    img = make_image(CaseParams(30, 20, "RGB", content="noise", seed=5))
    expected = preprocess([img], config)
    values = expected.pixel_values.clone()
    values[0::2] += 1.0 / 255  # every other patch moved: no variant, catalogued or fitted, makes that
    actual = PreprocessResult(values, expected.grid_thws)
    verdict = compare(expected, actual, config, sizes=[img.size])
    fields = finding_diagnosis("pixel_mismatch", verdict.stats, [img], config, expected=verdict.expected,
                               actual=verdict.actual)
    assert fields["root_causes"] == ["unexplained"]
    assert diagnosis_holds(fields, [img], config, verdict.actual, verdict.expected, 0)
    forged = copy.deepcopy(fields)
    forged["max_levels"] = forged["residual_max_levels"] = 0.4
    assert not diagnosis_holds(forged, [img], config, verdict.actual, verdict.expected, 0)
