"""The `sqsjkr` command line: the daemon, local mode and the operator commands.

The top layer: commands use the daemon, the backends and the contract, never the reverse.
"""
