"""What the HTTP API's tests share: a fleet of their module's own on moto, a tokens file of one
token per scope (and one of all three), and `sqsjkr web --api-tokens` serving it as a subprocess.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.conftest import Daemon, wait_until
from tests.web_fleet import WebFleet

#: Each token's secret, by its name; its scopes are its name's (all: every scope).
TOKENS = {
    "reader": ("tok-reader", ["read"]),
    "sender": ("tok-sender", ["read", "send"]),
    "actor": ("tok-actor", ["read", "act"]),
    "all": ("tok-all", ["read", "send", "act"]),
}


def tokens_file(directory: Path) -> Path:
    lines = []
    for name, (secret, scopes) in TOKENS.items():
        digest = hashlib.sha256(secret.encode()).hexdigest()
        listed = ", ".join(f'"{scope}"' for scope in scopes)
        lines.append(f'[tokens.{name}]\nsha256 = "{digest}"\nscopes = [{listed}]\n')
    path = directory / "tokens.toml"
    path.write_text("\n".join(lines))
    path.chmod(0o600)  # sqsjkr web refuses a tokens file others may write
    return path


@dataclass
class Served:
    """A live `sqsjkr web` with the API on: its URL and its process."""

    url: str
    process: Daemon

    def call(self, method: str, path: str, token: str | None = "all", **kwargs: Any) -> Any:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {TOKENS[token][0]}"
        return requests.request(method, self.url + path, headers=headers, timeout=90, **kwargs)


@contextmanager
def serve_api(
    fleet: WebFleet, env: dict[str, str], directory: Path, *args: str
) -> Iterator[Served]:
    """`sqsjkr web` on fleet's config, any free port, with the tokens file and args."""
    process = Daemon(
        ["web", "-c", str(fleet.conf), "--listen", "127.0.0.1:0", *args], env, directory
    )
    try:
        found = wait_until(
            lambda: re.search(r"sqsjkr web: (http://127\.0\.0\.1:\d+/)", process.log),
            30,
            "sqsjkr web's start-up line",
        )
        yield Served(found.group(1), process)
    finally:
        process.stop()


def aws_environment(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
