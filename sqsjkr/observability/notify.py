"""Telling systemd how the daemon is doing: the sd_notify protocol, spoken over NOTIFY_SOCKET directly.

Notifier is the seam the daemon depends on; outside systemd (no NOTIFY_SOCKET) every call does nothing.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, MutableMapping
from typing import Protocol

log = logging.getLogger("sqsjkr.notify")

#: The variables systemd sets for the notification protocol.
ENVIRONMENT = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")

#: A manager that has stopped reading its socket must not stall the receive loop for long.
SEND_TIMEOUT = 1.0


class Notifier(Protocol):
    """What the daemon tells its service manager."""

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between watchdog() calls at the most, or None when no watchdog is expecting them."""

    def ready(self) -> None:
        """Start-up is complete: the daemon is receiving."""

    def status(self, text: str) -> None:
        """A one-line state for `systemctl status`."""

    def stopping(self) -> None:
        """The daemon has begun to stop."""

    def watchdog(self) -> None:
        """The daemon is alive and its loop is turning."""


class NullNotifier:
    """A Notifier that tells no one."""

    @property
    def watchdog_interval(self) -> float | None:
        return None

    def ready(self) -> None:
        pass

    def status(self, text: str) -> None:
        pass

    def stopping(self) -> None:
        pass

    def watchdog(self) -> None:
        pass


class SystemdNotifier:
    """Sends sd_notify datagrams to a service manager's socket; never raises into the daemon."""

    def __init__(self, socket_name: str | None, *, watchdog_usec: int | None = None) -> None:
        """socket_name as in NOTIFY_SOCKET: a path, or "@name" in the abstract namespace; None = off.

        watchdog_usec is the manager's watchdog timeout (WATCHDOG_USEC), when it watches this process.
        """
        self._address = _address(socket_name) if socket_name else None
        if socket_name and self._address is None:
            log.warning("NOTIFY_SOCKET=%r is not a unix socket; not notifying", socket_name)
        # Pinging at half the timeout is systemd's own advice: one late ping is not fatal.
        self._watchdog_interval = (
            watchdog_usec / 2_000_000 if self._address is not None and watchdog_usec else None
        )
        self._warned = False

    @classmethod
    def from_environment(
        cls,
        env: MutableMapping[str, str] = os.environ,
        *,
        pid: int | None = None,
        unset: bool = False,
    ) -> SystemdNotifier:
        """A notifier for the manager that started this process; one that does nothing without one.

        unset removes the protocol's variables from env, so the jobs the daemon starts (which copy
        its environment) do not take systemd's messages as addressed to them.
        """
        notifier = cls(
            env.get("NOTIFY_SOCKET") or None,
            watchdog_usec=_watchdog_usec(env, os.getpid() if pid is None else pid),
        )
        if unset:
            for name in ENVIRONMENT:
                env.pop(name, None)
        return notifier

    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def watchdog_interval(self) -> float | None:
        return self._watchdog_interval

    def ready(self) -> None:
        self._send("READY=1")

    def status(self, text: str) -> None:
        # A newline would start another assignment, and the text must not be able to send one.
        self._send("STATUS=" + " ".join(text.splitlines()))

    def stopping(self) -> None:
        self._send("STOPPING=1")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    def _send(self, message: str) -> None:
        if self._address is None:
            return
        try:
            # A socket per message, as sd_notify does: nothing to keep open, close or reconnect
            # when the manager re-executes, and callers on any thread need no lock.
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.settimeout(SEND_TIMEOUT)
                sock.sendto(message.encode(), self._address)
        except OSError as exc:
            # Once at warning: a watchdog ping failing every few seconds would flood the log.
            level = logging.DEBUG if self._warned else logging.WARNING
            self._warned = True
            log.log(level, "could not notify systemd (%s): %s", message, exc)


def _address(socket_name: str) -> bytes | None:
    # The Linux abstract namespace is spelled with a leading NUL, which the variable cannot hold.
    if socket_name.startswith("@"):
        return b"\0" + os.fsencode(socket_name[1:])
    if socket_name.startswith("/"):
        return os.fsencode(socket_name)
    return None


def _watchdog_usec(env: Mapping[str, str], pid: int) -> int | None:
    """WATCHDOG_USEC when it is meant for pid; None when absent, malformed or another process's."""
    usec, owner = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
    if not usec:
        return None
    try:
        value = int(usec)
        # Without WATCHDOG_PID the watchdog is ours; with it, only if it names us (a child that
        # inherited the environment must not ping for its parent).
        if owner and int(owner) != pid:
            return None
    except ValueError:
        log.warning("ignoring malformed WATCHDOG_USEC=%r / WATCHDOG_PID=%r", usec, owner)
        return None
    return value if value > 0 else None
