"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def scope_options(func: F) -> F:
    """--source / --collection / --path, as `query` takes them (NotesService.scope_from_options)."""
    func = click.option("--path", "path", metavar="P", help="A file, or a folder searched recursively.")(func)
    func = click.option("--collection", metavar="C", help="Only this collection (folder with _meta.yaml).")(func)
    func = click.option("--source", "source_ids", multiple=True, metavar="ID", help="Only this source (repeatable).")(
        func
    )
    return func
