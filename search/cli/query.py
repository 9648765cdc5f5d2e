"""`query`: a ranked search of the index."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from search.cli.context import CliContext, pass_context
from search.cli.formats import chosen_format, emit, format_option
from search.cli.options import filter_options, scope_options
from search.engine import MODES
from search.terminal import echo, echo_json, styled

if TYPE_CHECKING:
    from search.engine import SearchResponse


@click.command()
@click.argument("text")
@click.option("-k", "k", default=8, show_default=True, type=click.IntRange(1, 1000), help="Number of results.")
@click.option("--mode", type=click.Choice(MODES), default="hybrid", show_default=True)
@scope_options
@filter_options
@click.option(
    "--per-file", type=click.IntRange(1), help="At most N hits from one file (so the top k spans more notes)."
)
@click.option(
    "--min-similarity",
    type=click.FloatRange(-1.0, 1.0),
    help="Drop hits found by meaning alone whose cosine similarity to the query is below X.",
)
@click.option("--explain", is_flag=True, help="Show each hit's BM25 rank, vector rank and fused score.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: query, mode, degraded, notice, results.")
@format_option()
@pass_context
def query(
    ctx: CliContext,
    text: str,
    k: int,
    mode: str,
    source_ids: tuple[str, ...],
    collection: str | None,
    path: str | None,
    tags: tuple[str, ...],
    since: str | None,
    until: str | None,
    per_file: int | None,
    min_similarity: float | None,
    explain: bool,
    as_json: bool,
    output_format: str | None,
) -> None:
    """Search the index."""
    fmt = chosen_format(output_format, as_json)
    service = ctx.service()
    from search.service.scope import Filters

    filters = Filters(tags, since, until)
    target = service.scope_from_options(
        source_ids, collection, path, filters=filters
    )  # bad flags fail before the index opens
    outcome = service.search(text, target=target, k=k, mode=mode, per_file=per_file, min_similarity=min_similarity)
    response = outcome.response
    response.notice = outcome.notice
    if fmt == "json":
        echo_json(response.to_json(explain=explain))
        if response.notice and response.degraded:
            echo(f"notice: {response.notice}", err=True)
        return
    if fmt != "text":  # the notice goes to stderr: stdout stays the format alone
        if response.notice:
            echo(f"notice: {response.notice}", err=True)
        emit("query", fmt, response.to_json(explain=explain))
        return
    _print_hits(response, explain)


def _print_hits(response: SearchResponse, explain: bool) -> None:
    if response.notice:
        echo(f"notice: {response.notice}", err=True)
    if explain and response.query_language is not None:
        echo(
            f"query language {response.query_language}; vectors {response.vector_space}; "
            f"{response.keyword_blind} candidates in other languages scored without keywords; "
            f"keyword weight {response.keyword_weight:g}"
        )
    if not response.results:
        echo("no results", err=True)
        return
    for hit in response.results:
        where = f"{hit.source}:{hit.path}:{hit.line}"
        echo(styled(where, fg="magenta"), "  ", styled(hit.breadcrumb, bold=True), f"  {hit.score:.4f}  {hit.matched}")
        if explain:
            e = hit.explain
            blind = "  (no keyword match possible)" if e.get("keyword_blind") else ""
            echo(
                f"    bm25 rank {e['bm25_rank'] or '-'}  vec rank {e['vec_rank'] or '-'}  rrf {e['rrf']}"
                f"  language {e.get('language') or '-'}{blind}"
            )
        lines = [ln for ln in hit.text.splitlines() if ln.strip()][:4]
        for line in lines:
            echo("    " + (line if len(line) <= 160 else line[:157] + "..."))
        echo()
