"""A botocore session that a Fleet's threads, or a command's several parts, share: each client made
once, under a lock, however many callers ask for it.
"""

from __future__ import annotations

import threading
from typing import Any


class SharedSession:
    """A botocore session that several threads may share: a session is not thread-safe, so its
    clients are made under a lock, once per service (a client is thread-safe, and reused). The
    layer's functions take it where they take a session."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, object], Any] = {}

    def create_client(self, service: str, config: Any = None, **more: Any) -> Any:
        # Keyed by the pool size too: the layer's clients differ by nothing else.
        key = (service, getattr(config, "max_pool_connections", None))
        with self._lock:
            if more or key not in self._clients:
                client = self._session.create_client(service, config=config, **more)
                if more:
                    return client
                self._clients[key] = client
            return self._clients[key]

    def __getattr__(self, name: str) -> Any:
        # Everything else (credentials, region) is the session's, called under the same lock.
        attribute = getattr(self._session, name)
        if not callable(attribute):
            return attribute

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attribute(*args, **kwargs)

        return locked
