"""Options shared by several commands."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def completes(kind: str) -> Any:
    """A `shell_complete` callback offering the config's source ids (`source`), the index's
    collections (`collection`) or files (`ref`); search.cli.completion loads only at a Tab."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> Any:
        from search.cli.completion import complete as candidates

        return candidates(kind, ctx, incomplete)

    return complete


def source_option(help: str = "Only this source (repeatable).") -> Callable[[F], F]:
    """--source ID, repeatable, completing the config's source ids."""
    return click.option(
        "--source",
        "source_ids",
        multiple=True,
        metavar="ID",
        help=help,
        shell_complete=completes("source"),
        callback=configured_sources,
    )


def configured_sources(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """An id the config does not name is a usage error (exit 2), as any other bad option value;
    the config is read for it only when --source is given."""
    from search.cli.context import CliContext

    context = ctx.find_object(CliContext)
    if not value or context is None:  # no group context: a completion, which checks nothing
        return value
    sources = context.config.sources
    for source_id in value:
        if source_id not in sources:
            known = ", ".join(sorted(sources)) or "none"
            raise click.BadParameter(f"unknown source {source_id!r} (configured: {known})")
    return value


def scope_options(func: F) -> F:
    """--source / --collection / --path, as `query` takes them (NotesService.scope_from_options)."""
    func = click.option("--path", "path", metavar="P", help="A file, or a folder searched recursively.")(func)
    func = click.option(
        "--collection",
        metavar="C",
        help="Only this collection: the name its folder's _meta.yaml gives it (`collections` lists them).",
        shell_complete=completes("collection"),
    )(func)
    return source_option()(func)


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


class TakesText(click.Command):
    """A command whose text argument may also come as `-e TEXT`, as ripgrep takes its pattern:
    a text beginning with '-' (a flag looked up in the notes) is otherwise read as an option,
    so the error for an unknown option names both ways of giving it.

    `text_param` is the argument's name; `several` lets -e repeat (grep: any of them matches)
    and hands the command a tuple. Use with `text_option`."""

    def __init__(self, *args: Any, text_param: str, several: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.text_param = text_param
        self.several = several

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        typed = list(args)  # the parser consumes `args`
        try:
            rest = super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if not exc.possibilities:  # not a near miss of an option: likely the text itself
                import shlex

                # the word as typed (`-allow-x` fails as `-a`), quoted as a shell takes it
                word = shlex.quote(next((a for a in typed if a.startswith(exc.option_name)), exc.option_name))
                hint = (
                    f"{exc.message} A {self._metavar()} beginning with '-' goes after `--` or `-e`: "
                    f"{ctx.command_path} -- {word}, or {ctx.command_path} -e {word}"
                )
                raise click.NoSuchOption(exc.option_name, hint, ctx=ctx) from None
            raise
        given: tuple[str, ...] = ctx.params.pop(TEXT_OPTION, ())
        positional = ctx.params.get(self.text_param)
        if ctx.resilient_parsing:  # shell completion: a half-typed line is no error
            return rest
        metavar = self._metavar()
        if given and positional is not None:
            raise click.UsageError(f"{metavar} given twice: as an argument and with -e (give one)", ctx)
        if len(given) > 1 and not self.several:
            raise click.UsageError(f"-e given {len(given)} times: {ctx.command_path} takes one {metavar}", ctx)
        if not given and positional is None:
            raise click.UsageError(f"Missing argument '{metavar}' (or give it as -e {metavar}).", ctx)
        texts = given or (positional,)
        ctx.params[self.text_param] = texts if self.several else texts[0]
        return rest

    def _metavar(self) -> str:
        for param in self.params:
            if param.name == self.text_param:
                return param.metavar or (param.name or "text").upper()
        return "TEXT"


TEXT_OPTION = "e_texts"  # where click puts -e values before TakesText hands them on as the text


def text_option(long: str | None = None, *, help: str) -> Callable[[F], F]:
    """`-e TEXT` (and a long name, if any), for a `TakesText` command."""
    names = ["-e", *([long] if long else [])]
    return click.option(*names, TEXT_OPTION, multiple=True, metavar="TEXT", help=help)
