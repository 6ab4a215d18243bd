"""A planted regression, kept for the README's main job and the gate's tests.

`preprocess` is the `eager` engine model (kimi_oracle.pipelines.eager) with one bug added on top:
the colour channels of every patch come out in reverse order (BGR instead of RGB). That is the
`patch-order` root cause of kimi_oracle.oracle.diagnosis, which `eager` itself does not have, so

    kimi-oracle gate --candidate examples/planted_regression.py:preprocess --baseline eager

must fail and name `patch-order` as `new` in the colour mode classes, while `eager`'s own
divergences (shared with the baseline) stay `known`. Grey images show it only under a
configuration whose mean/std differ per channel (their three channels are equal after the
conversion to RGB).
"""

from kimi_oracle.pipelines import eager


def preprocess(images, config):
    """`eager`, with the channels of every patch reversed."""
    out = eager.preprocess(images, config)
    out.pixel_values = out.pixel_values.flip(1)  # (patches, channels, patch, patch)
    return out
