"""The options that say where a fleet's table is (config, table, account), and the run history they
open for a command; kept apart from options.py so that `sqsjkr run` and the group load no history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqsjkr.commands.options import (
    UsageFailure,
    conf_option,
    load,
    lock_table_option,
    profile_option,
    region_option,
)
from sqsjkr.contract.config import Overrides
from sqsjkr.fleet.history import Store, store_of

F = TypeVar("F", bound=Callable[..., Any])


def store_options(command: F) -> F:
    """The options `run` also has that say where the history is: config, table, account."""
    for option in (
        region_option,
        profile_option,
        lock_table_option,
        conf_option,
    ):
        command = option(command)
    return command


def open_store(conf: str, lock_table: str | None, profile: str | None, region: str | None) -> Store:
    """The history the config's daemons write; a usage error when the config turns it off."""
    config = load(conf, Overrides(lock_table=lock_table, profile=profile, region=region))
    if config.history.backend == "none":
        raise UsageFailure(
            f'history is off in {conf} ([history] backend = "none"): no runs to show'
        )
    return store_of(config)
