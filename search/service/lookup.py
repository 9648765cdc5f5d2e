"""Looking things up without a ranked search: grep over the live files, the table of contents,
the collections, routing a question to collections, and scoring a question file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.collections import nfc
from indexer.errors import BadPattern, NotesSearchError
from indexer.store import SearchScope
from search.refs import Ref
from search.route import CollectionsView as CollectionsView  # re-exported: what `collections` returns
from search.route import list_collections
from search.service.scope import Place, Target, check_path_exists, narrow_to_prefix, scope_label

if TYPE_CHECKING:
    from indexer.config import Config
    from search.evaluate import EvalReport
    from search.grep import GrepHit, Unsearched
    from search.route import RouteResponse
    from search.service import NotesService


@dataclass(frozen=True)
class GrepOutcome:
    """At most `max_count` hits; `truncated` when there were more; what could not be searched.
    A line matches when any of `patterns` does."""

    patterns: tuple[str, ...]
    target: Target
    hits: list[GrepHit]
    truncated: bool
    max_count: int
    unsearched: list[Unsearched] = field(default_factory=list)


@dataclass(frozen=True)
class TocFile:
    """One source's table of contents, and why its file could not be refreshed (if so).
    `truncated`: `text` holds only its first lines, as the byte cap of the call allowed."""

    source_id: str
    file: Path
    text: str
    write_error: str | None = None
    truncated: bool = False


def grep_target(config: Config, source_ids: Sequence[str], path: str | None) -> Target:
    """What `grep --source ID --path P` names: the sources (all when none), each with the path.

    Unlike a search scope, the path need not exist in every selected source; a path that none
    has is reported by `grep` once it found nothing (a hit proves the path). A `SOURCE:`
    prefix narrows to that source; the path is confined in every selected source, and the
    first that refuses it refuses the whole grep.
    """
    from search.refs import confine_in

    selected = tuple(dict.fromkeys(source_ids))
    rest = ""
    if path:
        selected, rest = narrow_to_prefix(path, selected, config.sources)
    for source_id in selected:
        config.source(source_id)  # an unknown id is its one-line error
    searched = selected or tuple(config.sources)
    rel = confine_in(config, searched, rest) if rest else ""
    scope = SearchScope(source_ids=selected, path=nfc(rel) or None)
    return Target(scope, scope_label(scope), tuple(Place(source_id, rel) for source_id in searched))


def grep(
    service: NotesService,
    pattern: str | Sequence[str],
    *,
    target: Target | None,
    path: str | None,
    ignore_case: bool,
    fixed: bool,
    max_count: int,
) -> GrepOutcome:
    from search.grep import GrepResult
    from search.grep import grep as run_grep

    patterns = (pattern,) if isinstance(pattern, str) else tuple(pattern)
    found = GrepResult()
    with service.reading_if_indexed() as store:
        if target is None:  # resolved in the grep's own connection: the index opens once
            target = service.resolve(path, store)
        if not patterns or not all(patterns):
            raise BadPattern("empty pattern")
        # everything: one call over every source (those that cannot be searched are listed)
        places: list[tuple[tuple[str, ...], str | None]] = [((), None)]
        if not target.is_all:
            places = [((p.source_id,), p.folder or None) for p in target.places]
        for source_ids, place in places:
            # one line more than shown: "truncated" only when there really is more
            found.merge(
                run_grep(
                    service.config,
                    store,
                    patterns,
                    source_ids=source_ids,
                    path=place,
                    ignore_case=ignore_case,
                    fixed=fixed,
                    max_count=max_count + 1 - len(found),
                )
            )
            if len(found) > max_count:
                break
        if not found and not found.unsearched:
            # every selected source was searched and none holds the path: a typo, not "no matches"
            check_path_exists(service.config, store, target.scope)
    found.check_searched()
    from search.service.locating import file_on_disk

    hits = [replace(hit, file=file_on_disk(service.config, hit.source, hit.path)) for hit in found[:max_count]]
    return GrepOutcome(patterns, target, hits, len(found) > max_count, max_count, list(found.unsearched))


def toc(service: NotesService, source_ids: tuple[str, ...], *, max_bytes: int | None = None) -> list[TocFile]:
    """Render each source's table of contents from the index and refresh its file (whole). The
    texts returned share `max_bytes` UTF-8 bytes in source order, each cut at a whole line: a
    table of contents is an overview for a reader who pays for every byte (None: no cap)."""
    from indexer.toc import render_toc, toc_path, write_toc

    config = service.config
    selected = [config.source(source_id).id for source_id in source_ids] or list(config.sources)
    with service.reading() as store:
        tocs = [(source_id, render_toc(source_id, store.file_rows(source_id))) for source_id in selected]
    results = []
    left = max_bytes
    for source_id, text in tocs:
        path = toc_path(config, source_id)
        error = None
        try:
            write_toc(path, text)
        except OSError as exc:
            error = str(exc.strerror or exc)
        shown = text if left is None else _whole_lines(text, left)
        if left is not None:
            left -= len(shown.encode())
        results.append(TocFile(source_id, path, shown, error, truncated=shown != text))
    return results


def _whole_lines(text: str, budget: int) -> str:
    """The longest run of `text`'s first lines within `budget` UTF-8 bytes."""
    if len(text.encode()) <= budget:
        return text
    kept: list[str] = []
    for line in text.splitlines(keepends=True):
        budget -= len(line.encode())
        if budget < 0:
            break
        kept.append(line)
    return "".join(kept)


def collections(service: NotesService, prefix: str | None) -> CollectionsView:
    with service.reading() as store:
        return list_collections(store.collections(), prefix)


def indexed_refs(service: NotesService, prefix: str, limit: int) -> list[str]:
    """Indexed files whose `SOURCE:PATH` ref starts with `prefix`, and, for a prefix without a
    source, those whose bare PATH does (as `show` takes both): at most `limit`, sorted. Before
    the first sync: none."""
    refs: list[str] = []
    with service.reading_if_indexed() as store:
        if store is None:
            return []
        source, colon, _ = prefix.partition(":")
        for source_id in service.config.sources:
            if colon and source_id != source:
                continue
            for rel in store.known_files(source_id):
                ref = str(Ref(source_id, rel))
                if ref.startswith(prefix):
                    refs.append(ref)
                elif not colon and rel.startswith(prefix):
                    refs.append(rel)
    return sorted(set(refs))[:limit]


def route(service: NotesService, question: str, k: int) -> RouteResponse:
    """Rank the collections for a question (the embedder is asked as a search asks it)."""
    with service.reading() as store:
        entries = store.collections()
    return service.router().route(entries, question, k)


def evaluate(service: NotesService, file: Path, modes: tuple[str, ...]) -> EvalReport:
    from search.evaluate import load_questions, run_eval, unknown_targets

    config = service.config
    questions = load_questions(file, config.sources)
    with service.reading() as store:
        unknown = unknown_targets(store, questions)
        if unknown:
            raise NotesSearchError(f"{file}: expected files not in the index: " + "; ".join(unknown))
        return run_eval(
            store,
            config,
            questions,
            embedder_factory=service.embedder,
            modes=modes or ("lex", "vec", "hybrid"),
            file=str(file),
        )
