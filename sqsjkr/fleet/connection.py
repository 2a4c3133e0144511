"""What a sqsjkr.Fleet shares between its threads: its config, ONE boto3 session, the clients and
stores made from it (each made once, under a lock), and the actor its actions are audited as.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.config import CONFIG_ENV, DEFAULT_CONFIG_PATH, Config, load_config
from sqsjkr.fleet.audit import Actor, Auditor, auditor_of
from sqsjkr.fleet.history import Store
from sqsjkr.fleet.locks import Table
from sqsjkr.fleet.send import Sender
from sqsjkr.fleet.sessions import SharedSession

T = TypeVar("T")


class Connection:
    """The state a Fleet shares between threads, each part made on first use under one lock:
    the session (SharedSession), the run history's Store, the lock Table, the Sender, the
    Auditor. Reads and actions call the fleet layer's functions with them."""

    def __init__(
        self, config: Config | str | os.PathLike[str] | None = None, *, actor: str | None = None
    ) -> None:
        if config is None:  # as the commands' --conf: SQSJKR_CONF, else the hosts' path
            config = os.environ.get(CONFIG_ENV, DEFAULT_CONFIG_PATH)
        #: The config this Fleet acts on, read from its file (or as given).
        self.config = config if isinstance(config, Config) else load_config(config)
        #: The config as errors name it.
        self.source = "the config" if isinstance(config, Config) else os.fspath(config)
        self._user = actor
        self._made: dict[str, Any] = {}
        # Reentrant: the store is made while the session is being made for it.
        self._lock = threading.RLock()

    def _once(self, name: str, make: Callable[[], T]) -> T:
        with self._lock:
            if name not in self._made:
                self._made[name] = make()
            return self._made[name]  # type: ignore[no-any-return]

    @property
    def session(self) -> SharedSession:
        """The Fleet's one session."""
        account = self.config.account
        return self._once(
            "session",
            lambda: SharedSession(make_session(region=account.region, profile=account.profile)),
        )

    def client(self, service: str) -> Any:
        """The Fleet's client of service ("dynamodb", "sqs", ...), made once."""
        return self._once(f"client:{service}", lambda: make_client(self.session, service))

    @property
    def store(self) -> Store:
        """The run history of the config's table, and its client."""

        def make() -> Store:
            client = self.client("dynamodb")
            retention = self.config.history.retention.seconds
            history = DynamoHistory(client, self.config.lock.table, retention_seconds=retention)
            return Store(history, client, self.config.lock.table, self.config, self.session)

        return self._once("store", make)

    @property
    def table(self) -> Table:
        """The lock table, through the store's client."""
        return Table(self.store.client, self.store.table)

    @property
    def sqs(self) -> Any:
        return self.client("sqs")

    @property
    def auditor(self) -> Auditor:
        """Writes the audit items of this Fleet's actions (STS names its identity once)."""
        return self._once(
            "auditor", lambda: auditor_of(self.session, self.config.lock.table, self._user)
        )

    @property
    def actor(self) -> Actor:
        """Who this Fleet's actions are audited as: its actor (default: user@host of this
        process, as a command's) and its AWS identity."""
        return self.auditor.actor

    @property
    def sender(self) -> Sender:
        return self._once("sender", lambda: Sender(self.config, self.store, self.auditor))
