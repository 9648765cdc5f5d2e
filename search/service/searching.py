"""A search: resolve the scope, catch up the workspace places inside it, run the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from search.engine import SearchResponse
from search.engine import search as engine_search
from search.service.indexing import catch_up
from search.service.locating import with_files
from search.service.scope import check_scope_exists, unmatched_tags, with_filters

if TYPE_CHECKING:
    from search.service import NotesService
    from search.service.scope import Filters, Target


@dataclass(frozen=True)
class SearchOutcome:
    """The engine's answer, what was searched, and the catch-up notices (in place order)."""

    response: SearchResponse
    target: Target
    notices: tuple[str, ...] = ()

    @property
    def notice(self) -> str | None:
        """The engine's notice and the catch-up notices as one line."""
        return "; ".join(n for n in (self.response.notice, *self.notices) if n) or None


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
    on disk inside it; a lexical one never waits on embedding."""
    with service.reading() as store:
        if target is None:
            target = service.resolve(path, store)
        else:
            check_scope_exists(service.config, store, target.scope)
        target = with_filters(target, filters)
        lag = catch_up(service, target, embed=mode != "lex") if not target.is_all else []
        response = engine_search(
            store,
            service.config,
            query,
            k=k,
            mode=mode,
            scope=target.scope,
            embedder_factory=service.embedder,
            resident=service.resident_vectors() if resident and service.keeps_vectors_in_memory else None,
            per_file=per_file,
            min_similarity=min_similarity,
        )
        with_files(service.config, response.results)
        if not response.results and target.scope.has_filters:
            unknown = unmatched_tags(store, target.scope)
            lag.extend(f"no indexed file has the tag {tag!r}" for tag in unknown)
            if not unknown and not store.scope_stats(target.scope):  # the filters, not the words, left nothing
                lag.append(f"no indexed file passes the filters: {target.label}")
    return SearchOutcome(response, target, tuple(lag))
