"""`notes-search hooks`: the click front end of hooks/install.py (which knows nothing of click)."""

from __future__ import annotations

from pathlib import Path

import click

from search.cli.context import CliContext, pass_context
from search.cli.options import configured_sources
from search.terminal import echo


@click.group("hooks")
def hooks() -> None:
    """Git hooks that re-index a git source when command-line git fetches its mirror or a push
    lands in its local upstream repository."""


_git_sources_option = click.option(
    "--source",
    "source_ids",
    multiple=True,
    metavar="ID",
    help="Only this git source (repeatable; default: every git source).",
    callback=configured_sources,
)


@hooks.command("install")
@_git_sources_option
@click.option(
    "--upstream",
    is_flag=True,
    help="Also install post-receive into each source's local bare upstream repository (where you push).",
)
@pass_context
def install(ctx: CliContext, source_ids: tuple[str, ...], upstream: bool) -> None:
    """Install the re-index hook into each git source's mirror (the mirror must exist: sync first).

    The hook starts a background sync of that source and returns at once; it never fails git.
    A hook file that notes-search did not write is never replaced.
    """
    from hooks.install import HookWriteError, install_hooks

    config = ctx.service().config  # the service first: it opens the log file
    try:
        written = install_hooks(config, source_ids, upstream=upstream)
    except HookWriteError as exc:
        _report(exc.written)  # the hooks that were written work: say so before the error
        raise
    _report(written)


@hooks.command("uninstall")
@_git_sources_option
@click.option("--upstream", is_flag=True, help="Also delete post-receive from each local bare upstream repository.")
@pass_context
def uninstall(ctx: CliContext, source_ids: tuple[str, ...], upstream: bool) -> None:
    """Delete the hooks `hooks install` wrote for this config (a hook of another config, or not
    written by notes-search, stays)."""
    from hooks.install import HookWriteError, uninstall_hooks

    try:
        removed = uninstall_hooks(ctx.service().config, source_ids, upstream=upstream)
    except HookWriteError as exc:
        for path in exc.written:  # the ones deleted before the error: say so first
            echo(f"removed {path}")
        raise
    for path in removed:
        echo(f"removed {path}")
    if not removed:
        echo("no hook of this config to remove")


def _report(written: list[Path]) -> None:
    from hooks.install import hooks_path_override

    for path in written:
        echo(f"installed {path}")
        override = hooks_path_override(path.parent.parent)
        if override:
            echo(f"warning: core.hooksPath is set ({override}): git runs hooks from there, not {path.parent}", err=True)


@hooks.command("run", hidden=True)
@click.option("--source", "source_id", required=True, metavar="ID")
@pass_context
def run(ctx: CliContext, source_id: str) -> None:
    """The background job the hooks start (debounced, lock-waiting sync of one source)."""
    from hooks.install import run_hook_job

    service = ctx.service()
    run_hook_job(service.config, source_id, service.embedder)
