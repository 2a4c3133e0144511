"""The options that say where a fleet's table is (config, table, account), and the run history they
open for a command; kept apart from options.py so that `sqsjkr run` and the group load no history.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sqsjkr.commands.options import (
    UsageFailure,
    conf_option,
    load,
    lock_table_option,
    profile_option,
    region_option,
)
from sqsjkr.contract.config import Config, Overrides
from sqsjkr.fleet.audit import Auditor, auditor_of
from sqsjkr.fleet.history import Store, store_of
from sqsjkr.fleet.locks import Table, table_of

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Where:
    """--conf, --lock-table, --profile and --region: the config, and the table and account they
    change in it."""

    conf: str
    lock_table: str | None = None
    profile: str | None = None
    region: str | None = None

    def config(self) -> Config:
        overrides = Overrides(lock_table=self.lock_table, profile=self.profile, region=self.region)
        return load(self.conf, overrides)

    def store(self) -> Store:
        """The history the config's daemons write; a usage error when the config turns it off."""
        config = self.config()
        if config.history.backend == "none":
            raise UsageFailure(
                f'history is off in {self.conf} ([history] backend = "none"): no runs to show'
            )
        return store_of(config)

    def table(self) -> Table:
        """The config's [lock] table."""
        return table_of(self.config())


def auditor(store: Store) -> Auditor:
    """The Auditor of this command's OS user, through store's session and DynamoDB client: one
    session a command, each client made once (another costs ~15 ms of CPU)."""
    return auditor_of(store.session, store.table)


def audited_table(config: Config) -> tuple[Table, Auditor]:
    """The config's [lock] table and the Auditor of this command's actions on it, through one
    session and one DynamoDB client."""
    store = store_of(config)
    return Table(store.client, store.table), auditor(store)


def store_options(command: F) -> F:
    """The options `run` also has that say where the history is: config, table, account; the
    command is called with them as its first argument, a Where."""

    @functools.wraps(command)
    def with_where(
        conf: str, lock_table: str | None, profile: str | None, region: str | None, **options: Any
    ) -> Any:
        return command(Where(conf, lock_table, profile, region), **options)

    for option in (region_option, profile_option, lock_table_option, conf_option):
        with_where = option(with_where)
    return cast(F, with_where)
