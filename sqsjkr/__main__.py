"""`python -m sqsjkr`: the same as the `sqsjkr` command.

Tests start the daemon this way so they run the interpreter they were started with.
"""

from sqsjkr.commands.cli import main

main()
