"""`python -m postmortem` is the `postmortem` command."""

from postmortem.cli import main

main()
