"""`migrate`: copy the index into another store (a PostgreSQL server) without embedding again."""

from __future__ import annotations

import click

from search.cli.context import CliContext, pass_context
from search.terminal import echo


def _index_location(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """The target checked as `db:` is, before the source index is even opened."""
    from indexer.config import index_url

    try:
        index_url(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


@click.command()
@click.option(
    "--to",
    "target",
    required=True,
    metavar="URL",
    callback=_index_location,
    help="postgresql://user@host/dbname (or a SQLite file).",
)
@click.option("--force", is_flag=True, help="Replace whatever index the target holds.")
@pass_context
def migrate(ctx: CliContext, target: str, force: bool) -> None:
    """Copy the index, vectors included, into another store and verify the counts.

    Point the config's `db:` at the target afterwards; the SQLite file is left as it was.
    """
    import search.cli as package
    from indexer.redaction import describe_url, is_postgres_url
    from search.cli.index import _progress
    from search.service.migrating import migrate_index

    with _progress(package.stderr_is_terminal()) as progress:  # bars for a person at a terminal
        report = migrate_index(ctx.config, target, force=force, progress=progress)
    shown = describe_url(target) if is_postgres_url(target) else target  # no password on screen
    if report.replaced_unfinished:
        echo(f"replaced the unfinished copy an earlier migrate left in {shown}")
    echo(
        f"copied {report.sources} sources, {report.files} files, {report.chunks} chunks, {report.vectors} vectors"
        f" ({report.pending} pending) to {shown}; counts verified"
    )
