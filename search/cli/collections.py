"""`collections` and `route`: where a topic lives, before a search is scoped to it."""

from __future__ import annotations

import click

from search.cli.context import CliContext, pass_context
from search.route import ROUTE_K, collection_line
from search.terminal import echo, echo_json, styled


@click.command("collections")
@click.option("--prefix", metavar="P", help="Only collections whose name starts with P (or in group P).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: flat list, or groups beyond 50.")
@pass_context
def collections_command(context: CliContext, prefix: str | None, as_json: bool) -> None:
    """List collections (folders with _meta.yaml) as `name — description`."""
    view = context.service().collections(prefix)
    if as_json:
        echo_json(view.to_json())
        return
    if view.notice:
        echo(view.notice, err=True)
        return
    if view.groups is None:
        for entry in view.entries:
            echo(collection_line(entry))
        return
    for group in view.groups:
        echo(styled(f"{group.prefix}/ ({len(group.members)})", bold=True))
        for entry in group.members:
            echo("  " + collection_line(entry))


@click.command("route")
@click.argument("text")
@click.option("-k", "k", default=ROUTE_K, show_default=True, type=click.IntRange(1, 100), help="Collections to return.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@pass_context
def route_command(context: CliContext, text: str, k: int, as_json: bool) -> None:
    """Pick the collections a question most likely belongs to (then: query --collection NAME)."""
    response = context.service().route(text, k)
    if as_json:
        echo_json(response.to_json())
        return
    if response.notice:
        echo(f"notice: {response.notice}", err=True)
    for hit in response.results:  # relevance 0-100, then the words and the meaning that put it there
        echo(styled(f"{hit.relevance:>3}", bold=True), f" {collection_line(hit.entry)}")
        echo(f"    {hit.why()}")
