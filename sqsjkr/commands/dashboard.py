"""The one seam between the two faces: the command line starts the dashboard (sqsjkr/web/) here.

No other module of sqsjkr/commands/ imports sqsjkr.web; pyproject.toml's import-linter contract
allows this module's import alone, so the dashboard stays an extra the CLI can do without.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjkr.contract.config import Config

if TYPE_CHECKING:
    from sqsjkr.web.server import Dashboard

INSTALL_HINT = "the dashboard needs the web extra: pip install 'sqsjkr[web]'"


def web_available() -> bool:
    """Whether the web extra is installed (Flask, waitress, bcrypt, Flask-WTF, PyYAML)."""
    try:
        import bcrypt  # noqa: F401
        import flask  # noqa: F401
        import flask_wtf  # noqa: F401
        import waitress  # noqa: F401
        import yaml  # noqa: F401
    except ImportError:
        return False
    return True


def preload() -> None:
    """Import the dashboard (Flask and the rest, a second or so) ahead of serving it."""
    if web_available():
        import sqsjkr.web.server  # noqa: F401


def listening(config: Config, **options: Any) -> Dashboard:
    """The dashboard of config's fleet, listening but not serving yet; options are
    sqsjkr.web.server.WebOptions' fields. Call web_available() first."""
    from sqsjkr.web.server import WebOptions, dashboard

    return dashboard(config, WebOptions(**options))
