"""Local mode's machinery: an embedded moto endpoint, the fleet's queue, table and schedules on it, and the demo.

`sqsjkr local` (commands/run.py) parses its options and calls this; commands/local.py prints its steps.
"""
