"""`notes-search serve`: the warm path's server, one per config, on an owner-only unix socket.

It keeps what a one-shot process pays for on every call loaded (the modules, the language
identifier, the local model); `query`, `show`, `grep` and `status` hand their calls to it
(`search.warm`). The server itself is `search.cli.daemon_server`, imported only here when it
starts: `--help` lists this command without loading it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import click

from search.cli.context import CliContext, keep_services, pass_context
from search.terminal import echo

log = logging.getLogger("notes_search.serve")
UPGRADED_EXIT = 75  # EX_TEMPFAIL: "start me again" to a service manager (Restart=on-failure)


@click.command("serve")
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Exit after this many seconds without a call (default: run until stopped).",
)
@pass_context
def serve(ctx: CliContext, idle_timeout: float | None) -> None:
    """Keep the index, the model and the language identifier warm for `query`, `show`, `grep`
    and `status`, which use this server when it runs (NOTES_SEARCH_NO_DAEMON=1: never)."""
    from search import warm
    from search.cli.daemon_server import WarmServer, warm_up
    from search.interrupt import interrupted, stop_on_signals

    config_path = warm.config_file(ctx.config_option)
    keep_services()  # the calls reuse this config and service (the model, the router, the vectors)
    service = ctx.service()  # the config is valid and the log file is configured
    server = WarmServer(config_path, idle_timeout=idle_timeout)
    server.bind()
    received: list[int] = []
    try:
        warm_up(service)
        os.chdir("/")  # each call runs in its client's folder; between calls hold none open
        echo(f"notes-search serve: {config_path} on {server.path}", err=True)
        log.info("serving %s on %s (idle timeout: %s)", config_path, server.path, idle_timeout)
        with stop_on_signals(server.stop) as received:
            server.serve_forever()
    finally:
        server.close()
    log.info("stopped: %s", server.stop_reason)
    if signal.SIGINT in received:  # Ctrl-C: stopped cleanly, ended as every command ends on it
        interrupted()
    if server.upgraded:
        echo(f"notes-search serve: stopped: {server.stop_reason}; start it again to serve the new version", err=True)
        sys.exit(UPGRADED_EXIT)
