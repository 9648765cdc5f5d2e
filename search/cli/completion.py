"""Shell completion of source ids, collections and refs (click's `_NOTES_SEARCH_COMPLETE`).

Runs at every Tab: quick, and silent whatever goes wrong (no config, no index, a broken one):
then it offers nothing, as a shell expects, never an error or a log line."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import click
from click.shell_completion import CompletionItem

if TYPE_CHECKING:
    from search.service import NotesService

MAX_ITEMS = 200  # a longer list helps nobody at a prompt; type more letters

Completer = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]


def _service(ctx: click.Context) -> NotesService:
    """The service of the config the command line names (`-c`), or the one found as usual."""
    from search.service import NotesService

    return NotesService.from_config_file(ctx.find_root().params.get("config_path"))


def _sources(ctx: click.Context, incomplete: str) -> list[str]:
    return [source_id for source_id in _service(ctx).config.sources if source_id.startswith(incomplete)]


def _collections(ctx: click.Context, incomplete: str) -> list[str]:
    names = {entry.name for entry in _service(ctx).collections(None).entries}
    return sorted(name for name in names if name.startswith(incomplete))


def _refs(ctx: click.Context, incomplete: str) -> list[str]:
    return _service(ctx).indexed_refs(incomplete, MAX_ITEMS)


KINDS: dict[str, Callable[[click.Context, str], list[str]]] = {
    "source": _sources,
    "collection": _collections,
    "ref": _refs,
}


def complete(kind: str, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """The candidates for `kind` that start with `incomplete`; none when anything fails."""
    logging.disable(logging.CRITICAL)  # this process only completes: nothing may reach the prompt
    try:
        return [CompletionItem(value) for value in KINDS[kind](ctx, incomplete)[:MAX_ITEMS]]
    except Exception:  # noqa: BLE001 - a Tab must never print an error; offering nothing is the answer
        return []
