"""Candidates for the gate tests: a correct one that is deliberately slow."""

import time

from kimi_oracle import reference


def slow_reference(images, config):
    """The reference, correct, but 40 ms slower on every call."""
    time.sleep(0.04)
    return reference.preprocess(images, config)
