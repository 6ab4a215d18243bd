"""`python -m kimi_oracle.workflows.nightly --worker SPEC.json`: a worker subprocess (the runner's only)."""

from kimi_oracle.workflows.nightly.worker import main

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
