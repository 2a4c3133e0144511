"""Local mode's machinery: an embedded moto endpoint, the fleet's queue, table and schedules on it, and the demo.

`sqsjkr local` (commands/local.py) parses its options, calls this and prints; this knows nothing of click.
"""
