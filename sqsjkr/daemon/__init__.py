"""The daemon core: the receive loop, one job's path on a worker, the heartbeat and the runner.

service.serve() wires a Config into a running Kicker (daemon/loop.py).
"""
