"""`sqsjkr token new NAME --scope read,send >> FILE`: the lines that grant a new token of the HTTP
API in the file `sqsjkr web --api-tokens` reads, on stdout, and the token on stderr.
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
    """Print the lines that grant a new token to NAME (its actions are audited as api:NAME) on
    stdout, to append to the tokens file (`>> FILE`: the file keeps the token's SHA-256, never
    the token), and the token alone on stderr, shown once: hand it to the program. sqsjkr web
    reads the file again once it changes."""
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
    # The blank line first: appended to a file whose last line has no newline, the table still
    # begins a line of its own.
    click.echo(f"\n{lines}", nl=False)
    click.echo(secret, err=True)
