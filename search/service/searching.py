"""A search: resolve the scope, catch up the workspace places inside it, run the engine."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.errors import NotesSearchError
from search.engine import SearchResponse
from search.engine import search as engine_search
from search.hits import Hit
from search.refs import Ref, deleted_from_disk
from search.service.catchup import CatchUpChoice, catch_up, catch_up_unscoped
from search.service.locating import with_files
from search.service.scope import check_scope_exists, unmatched_tags, with_filters
from search.snippets import Term, snippet_in_bytes, snippet_terms, text_in_bytes

if TYPE_CHECKING:
    from search.service import NotesService
    from search.service.scope import Filters, Target


@dataclass(frozen=True)
class SearchOutcome:
    """The engine's answer, what was searched, and the catch-up notices (in place order)."""

    response: SearchResponse
    target: Target
    notices: tuple[str, ...] = ()
    catch_up: CatchUpChoice | None = None  # an unscoped search's: what it caught up, what it left

    @property
    def notice(self) -> str | None:
        """The engine's notice and the catch-up notices as one line."""
        return "; ".join(n for n in (self.response.notice, *self.notices) if n) or None

    @property
    def nothing_found(self) -> str | None:
        """What to try next when nothing was found and no notice says why."""
        if self.response.results or self.notice:
            return None
        other_mode = ", mode=lex for exact terms," if self.response.mode != "lex" else ""
        return f"nothing found in {self.target.label}; try other words{other_mode} or grep"

    @functools.cached_property
    def _terms(self) -> list[Term]:
        return snippet_terms(self.response.query)

    def shortened(self, hit: Hit, detail: str) -> str:
        """A hit's text for a reader who pays for every byte and reads on with `get`: "snippet"
        a few lines around its match (AGENT_SNIPPET_BYTES), "text" its chunk around its match
        line (AGENT_TEXT_BYTES)."""
        check_detail(detail)
        if detail == "snippet":
            return snippet_in_bytes(self._terms, hit.chunk_text, hit.line, hit.match_line, AGENT_SNIPPET_BYTES)
        return text_in_bytes(hit.chunk_text, hit.line, hit.match_line, AGENT_TEXT_BYTES)


DETAILS = ("text", "snippet")  # how much of each hit `SearchOutcome.shortened` keeps
# snippet: 8 hits in about 3.5 KB on an agent's wire (with `file`), Latin or Cyrillic notes alike
AGENT_SNIPPET_BYTES = 120
# text: 8 hits in about 10 KB on an agent's wire, Latin or Cyrillic notes alike
AGENT_TEXT_BYTES = 900


def check_detail(detail: str) -> None:
    """Refuse an unknown `detail` before the search runs."""
    if detail not in DETAILS:
        raise NotesSearchError(f"unknown detail {detail!r} (use one of {', '.join(DETAILS)})")


def search(
    service: NotesService,
    query: str,
    *,
    target: Target | None = None,
    path: str | None = None,
    k: int,
    mode: str,
    resident: bool = False,
    filters: Filters | None = None,
    per_file: int | None = None,
    min_similarity: float | None = None,
) -> SearchOutcome:
    """`target` (from the CLI flags, checked here to name something) or `path` (a tool
    argument, resolved here), narrowed by `filters`. A scoped search first indexes what changed
    on disk inside it, an unscoped one in the workspace sources small enough to walk at once;
    a lexical one never waits on embedding."""
    with service.reading() as store:
        if target is None:
            target = service.resolve(path, store)
        else:
            check_scope_exists(service.config, store, target.scope)
        target = with_filters(target, filters)
        choice = None
        if target.is_all:
            lag, choice = catch_up_unscoped(service, store, embed=mode != "lex")
        else:
            lag = catch_up(service, target, embed=mode != "lex")

        def run(wanted: int) -> SearchResponse:
            return engine_search(
                store,
                service.config,
                query,
                k=wanted,
                mode=mode,
                scope=target.scope,
                embedder_factory=service.embedder,
                resident=service.resident_vectors() if resident and service.keeps_vectors_in_memory else None,
                per_file=per_file,
                min_similarity=min_similarity,
            )

        response, deleted = _without_deleted_files(service, run, k)
        if deleted:
            shown = ", ".join(str(Ref(source_id, path)) for source_id, path in sorted(deleted)[:DELETED_SHOWN])
            more = f" and {len(deleted) - DELETED_SHOWN} more" if len(deleted) > DELETED_SHOWN else ""
            lag.append(
                f"left out {len(deleted)} file{'s' if len(deleted) > 1 else ''} deleted since the last sync: "
                f"{shown}{more} (the next `notes-search sync` drops them from the index)"
            )
        with_files(service.config, response.results)
        if not response.results and target.scope.has_filters:
            unknown = unmatched_tags(store, target.scope)
            if unknown:  # one clause for them all: 60 unknown tags made a notice of 60 clauses
                named = ", ".join(repr(tag) for tag in unknown)
                lag.append(f"no indexed file has the tag{'s' if len(unknown) > 1 else ''} {named}")
            if not unknown and not store.scope_stats(target.scope):  # the filters, not the words, left nothing
                lag.append(f"no indexed file passes the filters: {target.label}")
    return SearchOutcome(response, target, tuple(lag), choice)


DELETED_SHOWN = 3  # deleted files named in the notice
DELETED_ROUNDS = 3  # searches at most, each asking for as many more hits as the last one lost


def _without_deleted_files(
    service: NotesService, run: Callable[[int], SearchResponse], k: int
) -> tuple[SearchResponse, set[tuple[str, str]]]:
    """The engine's answer without hits in workspace files deleted since the last sync (the
    index still has them until a sync or the watcher drops them); what was lost is searched
    for again, so the answer still holds k hits when the index has them."""
    deleted: set[tuple[str, str]] = set()
    checked: set[tuple[str, str]] = set()  # a file is looked for on disk once, whatever the rounds
    wanted = k
    for _ in range(DELETED_ROUNDS):
        response = run(wanted)
        found = [(hit.source, hit.path) for hit in response.results]
        fresh = [f for f in found if f not in checked]
        deleted |= deleted_from_disk(service.config, fresh)
        checked.update(fresh)
        kept = [hit for hit, f in zip(response.results, found, strict=True) if f not in deleted]
        lost = len(response.results) - len(kept)
        response.results = kept[:k]
        if not lost or len(found) < wanted or len(kept) >= k:
            break
        wanted = k + lost
    return response, deleted
