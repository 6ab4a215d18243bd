"""The --known file naming accepted step variants (issue 25): a row is accepted only when the
attribution explained it by the entry's variant (taken, or a bit-identical alternative)."""

from __future__ import annotations

import pytest

from kimi_oracle.workflows.known import KnownFileError, Margin, aggregate, compare_rows, read_known


def obs(variant, *, alternatives=(), input="i1", mode="RGB"):
    return {"input": input, "stage": "fuzz", "check": "pixel_mismatch", "key": f"pixel_mismatch[{mode}]<levels>",
            "root_causes": ["resample-float"], "max_levels": 5.0, "mean_levels": 1.0, "share": 0.3, "message": "m",
            "attribution": {"max_levels": 5.0, "mean_levels": 1.0, "explained": [
                {"root_cause": "resample-float", "variant": variant, "residual_max_levels": 0.0,
                 "residual_mean_levels": 0.0, "alternatives": list(alternatives)}]}}


def known_file(tmp_path, body):
    path = tmp_path / "known.toml"
    path.write_text("schema_version = 1\n\n[[known]]\nroot_cause = \"resample-float\"\nmode_class = \"*\"\n" + body)
    return read_known(path)


def verdict(rows):
    (row,) = rows
    return row["verdict"], row["fails"], row["why"]


def test_the_accepted_variant_is_known_and_another_is_new(tmp_path):
    known = known_file(tmp_path, 'variant = "uint8-aa"\n')
    assert known.entries[0].variant == "uint8-aa"
    same = verdict(compare_rows(aggregate([obs("uint8-aa")]), None, Margin(), known=known))
    assert same[:2] == ("known", False)
    tie = verdict(compare_rows(aggregate([obs("torch-bicubic", alternatives=["resample-float/uint8-aa"])]), None,
                               Margin(), known=known))
    assert tie[:2] == ("known", False)
    other = verdict(compare_rows(aggregate([obs("uint8-aa"), obs("torch-bicubic", input="i2")]), None, Margin(),
                                 known=known))
    assert other[:2] == ("new", True) and "uint8-aa" in other[2] and "torch-bicubic" in other[2]


def test_an_entry_without_variant_accepts_any():
    from kimi_oracle.workflows.known import KnownEntry, KnownFile

    known = KnownFile(entries=[KnownEntry("resample-float", "*")])
    assert verdict(compare_rows(aggregate([obs("pillow-nearest")]), None, Margin(), known=known))[0] == "known"


@pytest.mark.parametrize("value, problem", [('"bogus"', "no variant 'bogus'"), ("3", "non-empty string"),
                                            ('""', "non-empty string")])
def test_a_bad_variant_is_an_error_naming_the_key(tmp_path, value, problem):
    with pytest.raises(KnownFileError, match=r"known\[0\]\.variant") as exc:
        known_file(tmp_path, f"variant = {value}\n")
    assert problem in str(exc.value)
