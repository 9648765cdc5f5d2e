"""Options shared by several commands."""

from __future__ import annotations

import math
import time
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


class Moment(click.ParamType[str]):
    """A --since/--until value, checked as the service will read it, so a bad one is a usage
    error naming the flag; the text itself is passed on (the service reads it against its now)."""

    name = "moment"

    def __init__(self, until: bool) -> None:
        self.until = until

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from search.service.dates import BadMoment, parse_moment  # only when the flag is given

        try:
            parse_moment(str(value), until=self.until, now=time.time())
        except BadMoment as exc:
            self.fail(f"{value!r}: {exc}", param, ctx)
        return str(value)


class NumberRange(click.FloatRange):
    """`click.FloatRange` that also refuses NaN, which passes every bound (each comparison with
    it is false) and would otherwise fail later as a domain error, or silently disable a check."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


class Tag(click.ParamType[str]):
    """A --tag value: one that folds to nothing (`''`, `#`) is a usage error naming the flag."""

    name = "tag"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from indexer.store.rows import tag_key

        if not tag_key(str(value)):
            self.fail(f"{value!r} names no tag", param, ctx)
        return str(value)


def filter_options(func: F) -> F:
    """--tag / --since / --until (search.service.scope.Filters): which files count, wherever they are."""
    func = click.option(
        "--until",
        type=Moment(until=True),
        metavar="WHEN",
        help="Only files last changed before the end of WHEN (a date includes that whole day).",
    )(func)
    func = click.option(
        "--since",
        type=Moment(until=False),
        metavar="WHEN",
        help="Only files last changed at or after WHEN: 2026-11-24, 2026-11-24T09:30, 7d, 2w, 3m, 1y, today.",
    )(func)
    func = click.option(
        "--tag",
        "tags",
        multiple=True,
        type=Tag(),
        metavar="T",
        help="Only files with this front-matter tag (repeatable: all of them; case and '#' ignored).",
    )(func)
    return func
