"""`notes-search watch`: the watcher as a foreground service (systemd, a terminal, a container).

Thin on purpose: the behaviour lives in `indexer.watch.Watcher`; this parses options, logs to
stderr as well (journald picks it up), and turns SIGTERM / Ctrl-C into a clean exit 0. A
watcher that failed for good exits 1, so `Restart=on-failure` brings it back.
"""

from __future__ import annotations

import logging
import signal
import threading

import click

from search.cli.context import CliContext, pass_context
from search.cli.options import NumberRange


@click.command()
@click.option(
    "--debounce",
    type=NumberRange(0.05, 60.0),
    default=0.5,
    show_default=True,
    metavar="SECONDS",
    help="Quiet time after the last change before a burst is indexed.",
)
@click.option(
    "--reconcile-every",
    type=NumberRange(min=0.0),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="Full rescan interval, for changes the events missed (network filesystems); 0 = never.",
)
@click.option(
    "--polling",
    is_flag=True,
    help="Poll the folders instead of using inotify (NFS, SMB, sshfs, FUSE: inotify sees nothing there).",
)
@pass_context
def watch(ctx: CliContext, debounce: float, reconcile_every: float, polling: bool) -> None:
    """Keep the index of the workspace sources in step with the disk until stopped.

    Runs beside `mcp` on the same index; both take the sync lock before writing.
    """
    # imported here: watchdog, numpy and the embedders must not slow down every other command
    from watchdog.observers import Observer
    from watchdog.observers.polling import PollingObserver

    from indexer.watch import Watcher
    from search.logfile import ROOT_LOGGER, configure_log_file
    from search.terminal import echo

    service = ctx.service()
    watcher = Watcher(
        service.config,
        service.embedder,
        debounce=debounce,
        reconcile_every=reconcile_every,
        observer_factory=PollingObserver if polling else Observer,
    )
    from search.interrupt import interrupted, stop_on_signals

    stderr = configure_log_file(service.config, create=True, also_stderr=True)
    stop = threading.Event()
    try:
        with stop_on_signals(stop) as received:
            try:
                watcher.start()  # logs "watching <roots>"
                while watcher.running and not stop.wait(1.0):
                    pass
            finally:
                watcher.stop()
    finally:
        if stderr is not None:
            logging.getLogger(ROOT_LOGGER).removeHandler(stderr)
    s = watcher.stats
    echo(f"stopped: {s.batches} batches, {s.reconciles} reconciles, {s.restarts} observer restarts", err=True)
    if watcher.failure or not stop.is_set():
        raise click.ClickException(watcher.failure or "the watcher stopped unexpectedly")
    if signal.SIGINT in received:  # Ctrl-C: a clean stop, ended as every command ends on it (130)
        interrupted()
