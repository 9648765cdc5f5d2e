"""`notes-search mcp`: the MCP server, over stdio or HTTP. The one place the CLI starts the
MCP front end; the server itself (search.mcp_server) knows nothing of click."""

from __future__ import annotations

import click

from search import mcp_server
from search.cli.context import CliContext, pass_context
from search.mcp_server import CALL_TIMEOUT, DEFAULT_PORT, TOKEN_ENV


@click.command("mcp")
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP (path /mcp) instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP bind address.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535), help="HTTP port.")
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    show_envvar=True,
    metavar="TOKEN",
    help="HTTP: require `Authorization: Bearer TOKEN`; mandatory for a non-loopback --host.",
)
@click.option(
    "--call-timeout",
    default=CALL_TIMEOUT,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    metavar="SECONDS",
    help="A tool call running longer answers with an error (the server goes on serving).",
)
@pass_context
def mcp(ctx: CliContext, use_http: bool, host: str, port: int, token: str | None, call_timeout: float) -> None:
    """MCP server for agents: search, get, grep, toc, collections, route, status, reindex (stdio by default)."""
    from indexer.hosts import is_loopback_host

    if use_http and not is_loopback_host(host) and not token:
        raise click.UsageError(
            f"--host {host} is reachable from other machines: set --token (or ${TOKEN_ENV}) so every "
            "request must carry `Authorization: Bearer <token>`"
        )
    if use_http and token:
        problem = mcp_server.token_problem(token, remote=not is_loopback_host(host))
        if problem:
            raise click.UsageError(problem)
    # an agent's `status` holds git sources against their remotes, as the CLI's does
    mcp_server.run(
        ctx.service(check_remote=True),
        http=(host, port, token or None) if use_http else None,
        call_timeout=call_timeout,
    )
