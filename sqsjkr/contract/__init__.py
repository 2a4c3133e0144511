"""The contract with users: the job message, Go durations, the config file and the limits they obey.

The bottom layer: it imports nothing else of sqsjkr but its errors.
"""
