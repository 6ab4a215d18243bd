"""Fuzzing engines: the hypothesis engine, the atheris harnesses and the candidate sandbox."""

# The atheris harnesses by name; defined here so that the atheris entry point can name them
# without importing the harness module before atheris' instrumentation hook is in place.
HARNESSES = ("structured", "decoder")
