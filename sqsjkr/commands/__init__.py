"""The `sqsjkr` command line: the daemon, local mode and the operator commands.

The top layer: commands stand on the fleet layer, local mode and the contract, never the reverse.
"""
