"""`python -m kimi_oracle` runs the CLI."""

from kimi_oracle.cli import main

main()
