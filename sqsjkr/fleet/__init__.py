"""The fleet API: everything an operator or a program can read of the fleet or do to it.

The faces (the CLI in sqsjkr/commands/, the dashboard in sqsjkr/web/) and programs call it; it knows nothing of them.
"""
