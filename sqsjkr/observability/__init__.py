"""What the daemon tells the world about itself: counters, the stats endpoint and systemd's notifier.

The daemon calls into it; it never calls into the daemon.
"""
