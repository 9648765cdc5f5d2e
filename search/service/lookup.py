"""Looking things up without a ranked search: grep over the live files, the table of contents,
the collections, routing a question to collections, and scoring a question file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexer.errors import NotesSearchError

if TYPE_CHECKING:
    from search.evaluate import EvalReport
    from search.grep import GrepHit, Unsearched
    from search.route import RouteResponse
    from search.service import NotesService
    from search.service.scope import Target


@dataclass(frozen=True)
class GrepOutcome:
    """At most `max_count` hits; `truncated` when there were more; what could not be searched."""

    pattern: str
    target: Target
    hits: list[GrepHit]
    truncated: bool
    unsearched: list[Unsearched] = field(default_factory=list)


@dataclass(frozen=True)
class TocFile:
    """One source's table of contents, and why its file could not be refreshed (if so)."""

    source_id: str
    file: Path
    text: str
    write_error: str | None = None


@dataclass(frozen=True)
class CollectionsView:
    """The collections as a flat list, or grouped by name prefix beyond a screenful."""

    data: dict[str, Any]

    @property
    def count(self) -> int:
        return int(self.data["count"])

    def to_json(self) -> dict[str, Any]:
        return dict(self.data)


def grep(
    service: NotesService, pattern: str, *, target: Target, ignore_case: bool, fixed: bool, max_count: int
) -> GrepOutcome:
    from search.grep import GrepResult
    from search.grep import grep as run_grep

    if not pattern:
        raise NotesSearchError("empty pattern")
    found = GrepResult()
    with service.reading_if_indexed() as store:
        # everything: one call over every source (those that cannot be searched are listed)
        places: list[tuple[tuple[str, ...], str | None]] = [((), None)]
        if not target.is_all:
            places = [((p.source_id,), p.folder or None) for p in target.places]
        for source_ids, place in places:
            # one line more than shown: "truncated" only when there really is more
            found.merge(run_grep(service.config, store, pattern, source_ids=source_ids, path=place,
                                 ignore_case=ignore_case, fixed=fixed, max_count=max_count + 1 - len(found)))
            if len(found) > max_count:
                break
    found.check_searched()
    return GrepOutcome(pattern, target, found[:max_count], len(found) > max_count, list(found.unsearched))


def toc(service: NotesService, source_ids: tuple[str, ...]) -> list[TocFile]:
    """Render each source's table of contents from the index and refresh its file."""
    from indexer.toc import render_toc, toc_path, write_toc

    config = service.config
    selected = [config.source(source_id).id for source_id in source_ids] or list(config.sources)
    with service.reading() as store:
        tocs = [(source_id, render_toc(source_id, store.file_rows(source_id))) for source_id in selected]
    results = []
    for source_id, text in tocs:
        path = toc_path(config, source_id)
        error = None
        try:
            write_toc(path, text)
        except OSError as exc:
            error = str(exc.strerror or exc)
        results.append(TocFile(source_id, path, text, error))
    return results


def collections(service: NotesService, prefix: str | None) -> CollectionsView:
    from search.route import collections_view, load_entries

    with service.reading() as store:
        return CollectionsView(collections_view(load_entries(store), prefix))


def route(service: NotesService, question: str, k: int) -> RouteResponse:
    from search.route import load_entries

    with service.reading() as store:
        entries = load_entries(store)
    return service.router().route(entries, question, k)


def evaluate(service: NotesService, file: Path, modes: tuple[str, ...]) -> EvalReport:
    from search.evaluate import load_questions, run_eval, unknown_targets

    config = service.config
    questions = load_questions(file, config.sources)
    with service.reading() as store:
        unknown = unknown_targets(store, questions)
        if unknown:
            raise NotesSearchError(f"{file}: expected files not in the index: " + "; ".join(unknown))
        return run_eval(store, config, questions, embedder_factory=service.embedder,
                        modes=modes or ("lex", "vec", "hybrid"), file=str(file))
