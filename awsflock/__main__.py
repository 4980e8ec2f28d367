"""``python -m awsflock`` runs the CLI."""

from awsflock.cli import main

main()
