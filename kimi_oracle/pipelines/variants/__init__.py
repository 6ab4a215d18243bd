"""Step families: the ways engines in the field do each step of the reference, as small functions.

Each function has the signature of the `reference.Steps` field it replaces and a docstring
saying where that way of doing the step occurs. The modules:

    resample   the 8-bit resampler (`Steps.resample`): float32 and uint8 torch paths, other filters
    normalize  the (3, 256) normalization table (`Steps.normalize`) in other float arithmetic
    modes      the fill's conversion rule, the composite, the background, what an engine does
               with transparency before the resize (`Steps.convert`, `composite`, `background`,
               `prepare`)
    layout     the padding and the patch order (`Steps.pad`, `Steps.patchify`)
    request    the decoded file: EXIF orientation, animation frame, decoder (`Steps.prepare`)

The diagnosis (`kimi_oracle.oracle.diagnosis`) names them family by family; this package only
computes them.
"""
