"""`sqsjkr token new NAME --scope read,send`: a new token for the HTTP API, and the lines that grant
it in the file `sqsjkr web --api-tokens` reads.
"""

from __future__ import annotations

import click

from sqsjkr.commands.options import UsageFailure
from sqsjkr.contract.tokens import NAME, SCOPES, new_token
from sqsjkr.errors import quote


@click.group()
def token() -> None:
    """Tokens of the HTTP API (sqsjkr web --api-tokens)."""


@token.command()
@click.argument("name")
@click.option(
    "--scope",
    "scopes",
    default="read",
    show_default=True,
    metavar="SCOPES",
    help="What it may do, comma-separated: read (the fleet's state), send (submit jobs), "
    "act (run, kill, pause, route, unlock, redrive).",
)
def new(name: str, scopes: str) -> None:
    """Print a new token for NAME (its actions are audited as api:NAME) on stdout, and on stderr
    the lines to add to the tokens file: the file keeps the token's SHA-256, never the token."""
    if not NAME.fullmatch(name):
        raise UsageFailure(
            f"NAME {quote(name)}: 1 to 64 letters, digits, '-' or '_' (the audit shows it)"
        )
    chosen = [scope.strip() for scope in scopes.split(",") if scope.strip()]
    unknown = sorted(set(chosen) - set(SCOPES))
    if unknown or not chosen:
        raise UsageFailure(
            f"--scope {quote(scopes)}: give some of {', '.join(SCOPES)}, comma-separated"
        )
    secret, lines = new_token(name, chosen)
    click.echo(secret)
    click.echo(f"\nAdd to the --api-tokens file (then restart sqsjkr web):\n\n{lines}", err=True)
