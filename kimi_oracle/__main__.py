"""`python -m kimi_oracle` runs the CLI."""

from .cli import main

main()
