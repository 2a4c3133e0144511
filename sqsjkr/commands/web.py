"""`sqsjkr web`: the dashboard of a config's fleet, on 127.0.0.1:8070 unless told otherwise.

This module imports without the web extra, so that the command can say how to install it; it
starts the dashboard (sqsjkr/web/) through commands/dashboard.py, the one seam between the faces.
"""

from __future__ import annotations

import ipaddress

import click

from sqsjkr.commands.dashboard import INSTALL_HINT, listening, web_available
from sqsjkr.commands.options import UsageFailure
from sqsjkr.commands.store import Where, store_options
from sqsjkr.errors import quote


def parse_listen(text: str) -> tuple[str, int]:
    """--listen HOST:PORT ([::1]:8070 for IPv6; PORT 0 for any free port)."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageFailure(f"--listen {quote(text)}: expected HOST:PORT (127.0.0.1:8070)")
    return host, int(port)


def check_proxies(proxies: tuple[str, ...], auth_header: str | None) -> None:
    for proxy in proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError as exc:
            raise UsageFailure(f"--trusted-proxy {quote(proxy)}: {exc}") from exc
    if bool(proxies) != bool(auth_header):
        raise UsageFailure(
            "--auth-header and --trusted-proxy go together: the header names the user only "
            "when it comes from a trusted proxy"
        )


@click.command()
@store_options
@click.option(
    "--listen",
    default="127.0.0.1:8070",
    show_default=True,
    metavar="HOST:PORT",
    help="Where to serve (port 0: any free port). Other hosts than this one reach a "
    "non-loopback address only: then give --allowed-host and a way to sign in.",
)
@click.option(
    "--enable-actions",
    is_flag=True,
    help="Offer run now, run a past firing, kill, pause, resume, route (and clear a route), "
    "unlock and redrive (POST, with a CSRF "
    "token and a confirm step, audited). They need a signed-in user unless the listener is "
    "loopback and no --allowed-host puts a proxy in front.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="HOST",
    help="A Host header to serve besides the listen address (a proxy's public name); repeat.",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="IP",
    help="An address (or CIDR) of a reverse proxy whose --auth-header names the user; repeat.",
)
@click.option(
    "--auth-header",
    metavar="NAME",
    help="The header a trusted proxy names the user in (X-Forwarded-User, X-Auth-Request-User).",
)
@click.option(
    "--basic-auth-file",
    metavar="PATH",
    help="Users and bcrypt hashes, as Prometheus' web config file: basic_auth_users: {USER: HASH}.",
)
@click.option(
    "--api-tokens",
    metavar="PATH",
    help="Serve the HTTP API under /api/v1 to the tokens of this TOML file ([tokens.NAME] with "
    "sha256 and scopes; `sqsjkr token new` makes one), read again whenever it changes; only "
    "its owner may write it. Without it the API answers 404.",
)
def web(
    where: Where,
    listen: str,
    enable_actions: bool,
    allowed_hosts: tuple[str, ...],
    trusted_proxies: tuple[str, ...],
    auth_header: str | None,
    basic_auth_file: str | None,
    api_tokens: str | None,
) -> None:
    """Serve the web dashboard of the config's fleet: what is wrong now, every event's runs and
    firings, what runs now, daemons, locks and groups, dead letters and the audit trail
    (read-only unless --enable-actions)."""
    host, port = parse_listen(listen)
    check_proxies(trusted_proxies, auth_header)
    if not web_available():
        raise click.ClickException(INSTALL_HINT)
    config = where.config()
    try:
        served = listening(
            config,
            host=host,
            port=port,
            enable_actions=enable_actions,
            allowed_hosts=allowed_hosts,
            trusted_proxies=trusted_proxies,
            auth_header=auth_header,
            basic_auth_file=basic_auth_file,
            api_tokens=api_tokens,
        )
    except OSError as exc:
        # A taken port, an address not of this host: the one line names the option to change.
        raise click.ClickException(f"--listen {listen}: {exc.strerror or exc}") from exc
    mode = served.guard.who_may_act() if enable_actions else "read-only"
    api = f"; HTTP API: {served.url}api/v1/" if api_tokens else ""
    click.echo(f"sqsjkr web: {served.url} ({mode}{api}); stop: Ctrl-C", err=True)
    try:
        served.run()
    except KeyboardInterrupt:
        pass
    finally:
        served.close()
