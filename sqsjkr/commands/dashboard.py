"""The one seam between the faces: the command line starts the dashboard (sqsjkr/web/) here, with
the HTTP API (sqsjkr/api/) mounted under /api/v1 on its listener.

No other module of sqsjkr/commands/ imports sqsjkr.web or sqsjkr.api; pyproject.toml's
import-linter contract allows this module's imports alone, so both stay an extra the CLI can do
without, and neither face imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjkr.contract.config import Config

if TYPE_CHECKING:
    from sqsjkr.web.server import Dashboard, Limits

INSTALL_HINT = "the dashboard needs the web extra: pip install 'sqsjkr[web]'"


def web_available() -> bool:
    """Whether the web extra is installed (Flask, waitress, bcrypt, Flask-WTF, PyYAML,
    flask-openapi3)."""
    try:
        import bcrypt  # noqa: F401
        import flask  # noqa: F401
        import flask_openapi3  # noqa: F401
        import flask_wtf  # noqa: F401
        import waitress  # noqa: F401
        import yaml  # noqa: F401
    except ImportError:
        return False
    return True


def preload() -> None:
    """Import the dashboard (Flask and the rest, a second or so) ahead of serving it."""
    if web_available():
        import sqsjkr.api.app  # noqa: F401
        import sqsjkr.web.server  # noqa: F401


def listening(
    config: Config,
    *,
    api_tokens: str | None = None,
    limits: Limits | None = None,
    **options: Any,
) -> Dashboard:
    """The dashboard of config's fleet, listening but not serving yet, and the HTTP API on its
    listener for the tokens of the file api_tokens (None: the API answers 404); options are
    sqsjkr.web.server.WebOptions' fields, limits what one client may hold of the listener
    (sqsjkr.web.server.Limits' defaults when None). Call web_available() first. ConfigError
    for a tokens file that cannot be used, OSError when the listener cannot listen."""
    from sqsjkr.api.app import PREFIX, api_of
    from sqsjkr.web.server import WebOptions, dashboard

    api = api_of(config, api_tokens)
    return dashboard(config, WebOptions(**options), mounts={PREFIX: api}, limits=limits)
