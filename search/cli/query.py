"""`query`: a ranked search of the index."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from search.cli.context import CliContext, pass_context
from search.cli.formats import HIT_FORMATS, NOTHING_FOUND, chosen_format, emit, format_option, query_md
from search.cli.options import NumberRange, TakesText, filter_options, scope_options, text_option
from search.engine import MODES
from search.refs import Ref
from search.snippets import marked, snippet_terms
from search.terminal import Safe, echo, echo_json, hyperlink, styled

# the formats --explain shows in: the text output, JSON and JSON lines (each hit's `explain`)
EXPLAINED_FORMATS = ("text", "json", "jsonl")

if TYPE_CHECKING:
    from search.engine import SearchResponse
    from search.hits import Hit


@click.command(cls=TakesText, text_param="text")
@click.argument("text", required=False)
@text_option(help="The TEXT, as an option: for one beginning with '-' (or put it after `--`).")
@click.option("-k", "k", default=8, show_default=True, type=click.IntRange(1, 1000), help="Number of results.")
@click.option("--mode", type=click.Choice(MODES), default="hybrid", show_default=True)
@scope_options
@filter_options
@click.option(
    "--per-file", type=click.IntRange(1), help="At most N hits from one file (so the top k spans more notes)."
)
@click.option(
    "--min-similarity",
    type=NumberRange(-1.0, 1.0),
    help="Drop hits found by meaning alone whose cosine similarity to the query is below X "
    "(keyword hits stay: no effect with --mode lex).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Show each hit's BM25 rank, vector rank, fused score and what each half added to it.",
)
@click.option("--full", is_flag=True, help="Print each hit's whole chunk instead of its snippet (in JSON: as text).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: query, mode, degraded, notice, results.")
@format_option(HIT_FORMATS)
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
    full: bool,
    as_json: bool,
    output_format: str | None,
) -> None:
    """Search the index for TEXT. Exit 0 with hits, 1 without (as grep; --json still prints
    its object), 2 on a usage error.

    A TEXT beginning with '-' goes after `--` or `-e`: notes-search query -e --console-address.
    """
    fmt = chosen_format(output_format, as_json)
    if explain and fmt not in EXPLAINED_FORMATS:
        raise click.UsageError(f"--explain shows in text, --json and --format jsonl, not in --format {fmt}")
    service = ctx.service()
    from search.service.scope import Filters

    filters = Filters(tags, since, until)
    target = service.scope_from_options(
        source_ids, collection, path, filters=filters
    )  # bad flags fail before the index opens
    outcome = service.search(text, target=target, k=k, mode=mode, per_file=per_file, min_similarity=min_similarity)
    response = outcome.response
    response.notice = outcome.notice
    service.remember_hits(text, response.results)  # `open RANK` opens hit RANK of this query
    if fmt == "json":
        data = response.to_json(explain=explain, full=full)
        if explain:  # unscoped: which workspace sources it caught up (null when scoped)
            data["explain"]["catch_up"] = None if outcome.catch_up is None else outcome.catch_up.to_json()  # type: ignore[index]
        echo_json(data)
        if response.notice and response.degraded:
            echo(f"notice: {response.notice}", err=True)
    elif fmt != "text":  # the notice goes to stderr: stdout stays the format alone
        if response.notice:
            echo(f"notice: {response.notice}", err=True)
        if fmt == "md":  # --full: each hit's whole chunk instead of its snippet, as in text
            echo(query_md(response.to_json(explain=explain, full=full), full=full), nl=False, multiline=True)
        else:
            emit("query", fmt, response.to_json(explain=explain, full=full))
    else:
        if explain and outcome.catch_up is not None:
            echo(f"catch-up: {outcome.catch_up.describe()}")
        _print_hits(response, explain, full)
    if not response.results:  # as grep: a script can test `if notes-search query ...`
        sys.exit(NOTHING_FOUND)


def _print_hits(response: SearchResponse, explain: bool, full: bool = False) -> None:
    """Hits grouped by file as ripgrep does (the file's best hit decides where it comes, a blank
    line between files); per hit `source:path:match_line` (what `show` and `open` take; on a
    terminal a link to the file), breadcrumb, score, how it matched and `#rank` (what `open
    RANK` takes), over the snippet."""
    if response.notice:
        echo(f"notice: {response.notice}", err=True)
    if explain and response.query_language is not None:
        echo(_explain_header(response))
    if not response.results:
        echo("no results", err=True)
        return
    terms = snippet_terms(response.query)
    by_file: dict[tuple[str, str], list[tuple[int, Hit]]] = {}
    for rank, hit in enumerate(response.results, 1):
        by_file.setdefault((hit.source, hit.path), []).append((rank, hit))
    for (source, path), hits in by_file.items():
        for rank, hit in hits:
            ref = Safe(
                styled(f"{Ref(source, path)}:", fg="magenta", bold=True) + styled(str(hit.match_line), fg="green")
            )
            echo(
                hyperlink(ref, hit.file),
                "  ",
                styled(hit.breadcrumb, bold=True),
                f"  {hit.score:.4f}  {hit.matched}  #{rank}",
            )
            if explain:
                e = hit.explain
                blind = "  (no keyword match possible)" if e.get("keyword_blind") else ""
                # lex mode never reads languages: it has nothing to weigh them for
                language = "" if response.mode == "lex" else f"  language {e.get('language') or '-'}"
                echo(
                    f"    bm25 rank {e['bm25_rank'] or '-'}  vec rank {e['vec_rank'] or '-'}"
                    f"  similarity {'-' if e.get('similarity') is None else e['similarity']}  rrf {e['rrf']}"
                    f"{language}{blind}"
                )
                echo(f"    why: {_why(response, e)}")
                echo(f"    file {hit.file or f'(in the mirror at {hit.rev})'}")
            for line in (hit.chunk_text or hit.text).split("\n") if full else hit.snippet.split("\n"):
                if line:
                    echo(
                        "    ", *(styled(part, bold=True) if is_term else part for part, is_term in marked(terms, line))
                    )
                else:
                    echo()
        echo()


def _explain_header(response: SearchResponse) -> str:
    """The query's part of --explain: its language and how the halves were weighed."""
    header = f"query language {response.query_language}; vectors {response.vector_space}"
    if response.mode != "hybrid":  # one half alone: nothing was weighed
        return header
    header += (
        f"; {response.keyword_blind} candidates in other languages (or scripts) scored without keywords; "
        f"keyword weight {response.keyword_weight:g}{_weight_reason(response)}"
    )
    if response.meaning_weight < 1:
        header += f"; meaning weight {response.meaning_weight:g} (its first hit stands out little from its 10th)"
    if response.background:
        header += f"; {response.background} of them background (stand out from none of their language's)"
    return header


def _weight_reason(response: SearchResponse) -> str:
    """Why the keyword half weighs what it does (the header of --explain)."""
    if response.exact_value:
        return f" (a rare term of no language, {response.exact_value_term!r}, was found: plain fusion)"
    if response.keyword_coverage == 0:
        return " (the keyword half found nothing)"
    if response.keyword_coverage is not None:
        return f" (its best note holds {response.keyword_coverage:.0%} of the query's terms; weight = share squared)"
    return ""


def _shown_parts(parts: list[float], total: float, places: int = 6) -> list[float]:
    """`parts` (adding up to `total`) rounded to `places` so that they add up to `total`
    rounded the same way, the `rrf` shown: each is off its true value by less than one unit of
    the last place, as any rounding is. Parts that do not add up to `total` are only rounded."""
    unit = 10**-places
    shown = [round(part, places) for part in parts]
    missing = round((round(total, places) - sum(shown)) / unit)
    if abs(missing) > len(parts):  # not rounding: these parts are not that total's
        return shown
    # the unit goes to (or comes from) the parts rounding moved the furthest
    order = sorted(range(len(parts)), key=lambda i: (parts[i] - shown[i]) * (1 if missing > 0 else -1), reverse=True)
    for i in order[: abs(missing)]:
        shown[i] = round(shown[i] + (unit if missing > 0 else -unit), places)
    return shown


def _why(response: SearchResponse, e: dict[str, float | int | str | None]) -> str:
    """A hit's fused score as the sum of what each half added: weight / (k + rank), the parts
    shown so that they add up to the score shown."""
    k = response.rrf_k
    halves = [name for name, off in (("bm25", "vec"), ("vec", "lex")) if response.mode != off]
    added = [float(e.get(f"{name}_part") or 0.0) for name in halves]
    total = e.get("rrf")  # without it (never from a search) the parts are only rounded
    rounded = [round(part, 6) for part in added] if total is None else _shown_parts(added, float(total))
    shown = dict(zip(halves, rounded, strict=True))
    parts = []
    if "bm25" in shown:
        rank = e.get("bm25_counted_rank") or e.get("bm25_rank")
        weight = response.keyword_weight if response.mode == "hybrid" else 1.0
        if rank is None or e.get("bm25_part") is None:
            parts.append("keyword -")
        elif weight == 0:
            parts.append("keyword 0 (weight 0)")
        else:
            counted = ""
            if e.get("bm25_counted_rank") is not None:
                instead = f"found at {e['bm25_rank']}, " if e.get("bm25_rank") is not None else ""
                other = "another script" if e.get("language") == "unknown" else "another language"
                counted = f" ({other}: {instead}counted at twice its meaning rank)"
            parts.append(f"keyword {weight:g}/({k}+{rank}) = {shown['bm25']:.6f}{counted}")
    if "vec" in shown:
        if e.get("vec_rank") is None or e.get("vec_part") is None:
            parts.append("meaning -")
        else:
            at = e.get("vec_counted_rank")
            passed = f" (rank {e['vec_rank']} behind other languages' background: counted at {at})" if at else ""
            meaning = response.meaning_weight if response.mode == "hybrid" else 1.0
            parts.append(f"meaning {meaning:g}/({k}+{at or e['vec_rank']}) = {shown['vec']:.6f}{passed}")
    why = " + ".join(parts)
    if e.get("background"):
        why += (
            "; background: stands out from none of its language's notes, so the keyword half's"
            " best hits were ranked by meaning as if it were not ahead of them"
        )
    if e.get("verbatim"):
        why += "; holds the whole query as typed (a command or value): placed first"
    if e.get("exact_terms"):
        why += f"; holds {e['exact_terms']} identifier term(s) as typed: placed before prefix-only matches"
    elif e.get("exact_terms") == 0:
        why += (
            "; holds the identifier term(s) only as the start of a longer word: placed after hits holding them as typed"
        )
    if e.get("place") is not None:
        why += (
            f"; shown in a place scored {e['place']:.6f}:"
            " hits found by meaning alone keep the meaning half's order among themselves"
        )
    if e.get("window") is not None:
        why += f"; nearest in meaning: its window {e['window']} of {e['windows']}, shown from where it begins"
    if e.get("tie") in TIE_REASONS:
        why += f"; tied in score with the hit fused just above it, which came first {TIE_REASONS[str(e['tie'])]}"
    return why


# why rrf put one of two equal scores first (fusion.TIE_RULES)
TIE_REASONS = {
    "taken": "as both halves found it (no keyword part taken for its language)",
    "recency": "as the more recent note",
    "id": "as the earlier indexed (equally recent)",
}
