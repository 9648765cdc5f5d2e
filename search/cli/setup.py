"""`config` and `source`: which config file is used, and editing its sources by command."""

from __future__ import annotations

import sys

import click

from search.cli.context import CliContext, pass_context
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
