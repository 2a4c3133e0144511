"""`python -m sqsjkr`: the same as the `sqsjkr` command.

Tests start the daemon this way so they run the interpreter they were started with.
"""

from .cli import main

main()
