"""`config` and `source`: which config file is used, and editing its sources by command."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from search.cli.context import CliContext, pass_context
from search.cli.options import completes
from search.terminal import echo, echo_json


@click.group("config")
def config_group() -> None:
    """Which config file is used."""


@config_group.command("path")
@click.option("--json", "as_json", is_flag=True, help="Print {path, reason, exists, looked_at} as JSON.")
@pass_context
def config_path(ctx: CliContext, as_json: bool) -> None:
    """Print the config file every command uses here, and why that one.

    The order: --config, $NOTES_SEARCH_CONFIG, ./notes-search.yaml, then
    ${XDG_CONFIG_HOME:-~/.config}/notes-search/config.yaml. Exits 1 when there is none.
    """
    from indexer.config import load_located_config
    from indexer.errors import ConfigError

    location = ctx.location
    if as_json:
        echo_json(location.to_json())
    else:
        echo(str(location.path))
        echo(f"  {location.reason}" + ("" if location.found else " (the file does not exist)"))
    if not location.found:
        if as_json:
            sys.exit(1)
        try:
            load_located_config(location)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None


def _name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from search.cli.index import _source_id

    return _source_id(ctx, param, value)


def _selection_options(command: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(
        [
            click.option("--paths", multiple=True, metavar="GLOB", help="Folders to index (repeatable; default **)."),
            click.option("--include", multiple=True, metavar="GLOB", help="File names to index (default *.md)."),
            click.option("--exclude", multiple=True, metavar="GLOB", help="Paths never indexed (repeatable)."),
            click.option("--json", "as_json", is_flag=True, help="Print what was added as JSON."),
        ]
    ):
        command = option(command)
    return command


@click.group("source")
def source_group() -> None:
    """Add, list and remove sources in the config file (its comments and layout are kept)."""


@source_group.group("add")
def source_add() -> None:
    """Add a git or a workspace source; `notes-search sync` then indexes it."""


@source_add.command("git")
@click.argument("name", callback=_name)
@click.argument("url")
@click.option("--branch", metavar="BRANCH", help="Branch to index (default: the remote's HEAD).")
@click.option("--mirror", metavar="PATH", help="Where the bare mirror goes (default: mirrors/NAME.git under root).")
@_selection_options
@pass_context
def add_git(
    ctx: CliContext,
    name: str,
    url: str,
    branch: str | None,
    mirror: str | None,
    paths: tuple[str, ...],
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    as_json: bool,
) -> None:
    """Add git source NAME, read from URL (a remote URL or a local repository path)."""
    from search.service.sources import Selection

    selection = Selection(paths, include, exclude)
    added = ctx.service().add_git_source(name, url, branch=branch, mirror=mirror, selection=selection)
    _say_added(added.to_json(), as_json)


@source_add.command("workspace")
@click.argument("name", callback=_name)
@click.argument("folder", metavar="DIR")
@_selection_options
@pass_context
def add_workspace(
    ctx: CliContext,
    name: str,
    folder: str,
    paths: tuple[str, ...],
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    as_json: bool,
) -> None:
    """Add workspace source NAME: the folder DIR, read in place (never written to)."""
    from search.service.sources import Selection

    added = ctx.service().add_workspace_source(name, folder, Selection(paths, include, exclude))
    _say_added(added.to_json(), as_json)


def _say_added(data: dict[str, object], as_json: bool) -> None:
    if as_json:
        echo_json(data)
        return
    echo(f"added {data['added']} to {data['config']}; next: notes-search sync --source {data['added']}")


@source_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print {config, sources: [...]} as JSON.")
@pass_context
def list_sources(ctx: CliContext, as_json: bool) -> None:
    """The configured sources: kind, where they are read from, what they admit."""
    from search.service.sources import describe

    sources = [describe(source) for source in ctx.config.sources.values()]
    if as_json:
        echo_json({"config": str(ctx.config.path), "sources": sources})
        return
    if not sources:
        echo(f"no sources in {ctx.config.path} (add one with `notes-search source add`)")
    for s in sources:
        where = s.get("url") or s.get("root")
        branch = f" (branch {s['branch']})" if s.get("branch") else ""
        echo(f"{s['id']:<16} {s['kind']:<9} {where}{branch}")
        echo(
            f"    paths {', '.join(s['paths']) or '(none)'}; include {', '.join(s['include']) or '(none)'}"
            + (f"; exclude {', '.join(s['exclude'])}" if s["exclude"] else "")
        )


@source_group.command("remove")
@click.argument("name", shell_complete=completes("source"))
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
@pass_context
def remove_source(ctx: CliContext, name: str, as_json: bool) -> None:
    """Remove source NAME from the config and the index, and delete its git mirror.

    The notes themselves (a workspace folder, the upstream repository) are never touched.
    """
    removed = ctx.service().remove_source(name)
    if as_json:
        echo_json(removed.to_json())
        return
    mirror = f", deleted its mirror {removed.mirror_removed}" if removed.mirror_removed else ""
    rows = "and the index" if removed.index_rows_removed else "(no index yet)"
    echo(f"removed {name} from {removed.config} {rows}{mirror}")
    for notice in removed.notices:
        echo(f"warning: {notice}", err=True)
