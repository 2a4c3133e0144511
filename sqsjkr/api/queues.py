"""The queues a token may name: the fleet's job queues alone, and any other answered as one that
does not exist, so that neither a send nor a read reaches or tells of the account's other queues.
"""

from __future__ import annotations

from sqsjkr.api.problems import ApiProblem
from sqsjkr.errors import quote
from sqsjkr.fleet.client import Fleet


def fleet_queue(fleet: Fleet, name: str | None) -> str | None:
    """name, when it is one of the fleet's job queues (None: the config's default queue);
    404 not-found otherwise, worded as for a queue that does not exist (a dead-letter queue,
    another application's queue and a misspelt name are answered alike)."""
    if name is None or name in fleet.job_queues():
        return name
    raise ApiProblem(404, "not-found", f"no queue {quote(name)} of this fleet")
