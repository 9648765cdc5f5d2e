"""Where a path argument points: one resolution for the MCP tools, status, reindex and the CLI
flags, and one confinement rule under all of them.

Confinement is per source: a path that escapes one source's root (through a symlink, say) may
still be a real folder of another, so a source that refuses it is left out, and only when every
candidate refuses does the refusal reach the caller.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from indexer.collections import nfc
from indexer.config import Config
from indexer.errors import NotesSearchError, PathOutsideSources, SourceError
from indexer.store import IndexReader, SearchScope, tag_key
from search.refs import Ref, confine, confine_in, has_path, split_source

# Every tag must be present: a note carries a handful, so more than this many is a mistake (and
# SQLite refuses a query of ~500 tag conditions, "Expression tree is too large")
MAX_TAGS = 64


@dataclass(frozen=True)
class Place:
    """A folder or file of one source ('' = its root): what a catch-up, reindex or grep visits."""

    source_id: str
    folder: str


@dataclass(frozen=True)
class Target:
    """A scope for the index, a label said back to the caller, and the places on disk."""

    scope: SearchScope
    label: str  # e.g. "all sources", "source notes", "collection devops", "notes:devops"
    places: tuple[Place, ...] = ()
    # nothing named: the whole index. `--path .` has the same scope but names every source
    # whole, so it is searched like a source (caught up first) and may be re-indexed.
    is_all: bool = False


@dataclass(frozen=True)
class Filters:
    """What a search keeps besides its place, as the caller wrote it: front-matter tags (every
    one required, so repeating a tag narrows; `#` and case do not matter) and the moments of
    `search.service.dates` (since inclusive, until exclusive, on the time a file last changed:
    its mtime in a workspace, the commit time of its last change in git)."""

    tags: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None

    @property
    def is_empty(self) -> bool:
        return not self.tags and self.since is None and self.until is None


def with_filters(target: Target, filters: Filters | None, now: float | None = None) -> Target:
    """`target` narrowed by `filters`, its label saying what was filtered (`source notes (tag
    devops, since 2026-11-24)`). Bad values raise NotesSearchError naming the argument. The
    places stay: a filter changes which indexed files count, not what a catch-up re-scans."""
    if filters is None or filters.is_empty:
        return target
    from search.service.dates import BadMoment, describe, parse_moment

    now = time.time() if now is None else now
    keys: list[str] = []
    for tag in filters.tags:
        key = tag_key(tag)
        if not key:
            raise NotesSearchError(f"tag {tag!r} is empty")
        keys.append(key)
    if len(set(keys)) > MAX_TAGS:
        raise NotesSearchError(f"{len(set(keys))} tags given: at most {MAX_TAGS} (a note must have every one)")
    parts = [f"tag {key}" for key in dict.fromkeys(keys)]
    bounds: dict[str, float] = {}
    for name, text in (("since", filters.since), ("until", filters.until)):
        if text is None:
            continue
        try:
            bounds[name] = parse_moment(text, until=name == "until", now=now)
        except BadMoment as exc:
            raise NotesSearchError(f"{name} {text!r}: {exc}") from None
        parts.append(f"{name} {describe(text, bounds[name])}")
    since, until = bounds.get("since"), bounds.get("until")
    if since is not None and until is not None and since >= until:
        raise NotesSearchError(f"since {filters.since!r} is not before until {filters.until!r}: nothing could match")
    scope = dataclasses.replace(
        target.scope, tags=tuple(dict.fromkeys(keys)), updated_since=since, updated_before=until
    )
    return dataclasses.replace(target, scope=scope, label=f"{target.label} ({', '.join(parts)})")


def unmatched_tags(store: IndexReader, scope: SearchScope) -> list[str]:
    """The scope's tags that no indexed file has: why a tag filter found nothing."""
    return [tag for tag in scope.tags if not store.scope_stats(SearchScope(tags=(tag,)))]


def narrow_to_prefix(path: str, source_ids: tuple[str, ...], sources: Collection[str]) -> tuple[tuple[str, ...], str]:
    """A `SOURCE:` prefix on a path narrows to that source; with --source it must be among them.
    Returns the source ids and the rest of the path. The user's text is quoted with repr, so
    that whatever it holds is shown escaped."""
    prefix, rest = split_source(path, sources)
    if prefix is None:
        return source_ids, rest
    if source_ids and prefix not in source_ids:
        raise NotesSearchError(
            f"--path {path!r} is in source {prefix!r}, which --source {', '.join(source_ids)} leaves out"
        )
    return (prefix,), rest


def confined_places(
    config: Config, candidates: Sequence[str], rest: str, store: IndexReader | None, *, in_tree: bool = False
) -> tuple[list[str], str, PathOutsideSources | None]:
    """The candidates that admit `rest` (confined, and the path is on disk or in the index, or
    with `in_tree` in a git source's indexed tree), the confined path, and the first refusal
    (raised by the caller when nobody admits it)."""
    found: list[str] = []
    refused: PathOutsideSources | None = None
    rel = ""
    for candidate in candidates:
        try:
            rel = confine(config, candidate, rest)
        except PathOutsideSources as exc:
            refused = refused or exc
            continue
        if not rel or has_path(config, store, candidate, rel, in_tree=in_tree):
            found.append(candidate)
    return found, rel, refused


def resolve_path(config: Config, store: IndexReader | None, path: str | None) -> Target:
    """Source id -> that source; collection name -> its folder(s); else a confined path
    (`source:path`, or a bare path in every source that has it). None -> everything."""
    from search.refs import lexically_inside, split_source
    from search.service.locating import LINE_TAIL, ref_of_file

    text = (path or "").strip()
    if not text:
        return Target(SearchScope(), "all sources", tuple(Place(sid, "") for sid in config.sources), is_all=True)
    if text in config.sources:
        return Target(SearchScope(source_ids=(text,)), f"source {text}", (Place(text, ""),))
    entries = [e for e in store.collections() if e.name == text] if store is not None else []
    if entries:
        places = tuple(Place(e.source_id, e.folder) for e in entries)
        return Target(SearchScope(collection=text), f"collection {text}", places)
    # a hit's own `file` (absolute, in a source's folder) or `ref` (with its :LINE) names its file
    text = ref_of_file(config, text)
    source_id, rest = split_source(text, config.sources)
    if source_id is None:
        lexically_inside(rest)
    candidates = [source_id] if source_id else list(config.sources)
    found, rel, refused = confined_places(config, candidates, rest, store)
    if not found and (line := LINE_TAIL.search(rest)):
        found, rel, refused = confined_places(config, candidates, rest[: line.start()], store)
    if not found:  # only now the git mirrors: a file of the tree the sync skipped (not UTF-8 ...)
        found, rel, refused = confined_places(config, candidates, rest, store, in_tree=True)
    if not found:
        if refused is not None:
            raise refused
        where = f"source {source_id}" if source_id else "any source (" + ", ".join(config.sources) + ")"
        raise SourceError(f"{text!r}: no such file or folder, collection or source in {where}")
    key = nfc(rel)  # index paths are NFC
    label = str(Ref(found[0], key)) if len(found) == 1 else key
    return Target(
        SearchScope(source_ids=tuple(found), path=key or None), label, tuple(Place(sid, rel) for sid in found)
    )


def resolve_options(config: Config, source_ids: tuple[str, ...], collection: str | None, path: str | None) -> Target:
    """--source / --collection / --path as one target. A `SOURCE:` prefix on the path narrows
    to that source (it must be among --source when both are given); the path is normalised and
    confined like every other path argument. Places: what a catch-up re-scans (nothing when
    the whole index is searched without a path)."""
    for source_id in source_ids:
        config.source(source_id)
    if path is None:
        scope = SearchScope(source_ids=tuple(source_ids), collection=collection)
        places = tuple(Place(sid, "") for sid in source_ids)
        return Target(scope, scope_label(scope), places, is_all=scope.is_all)
    source_ids, rest = narrow_to_prefix(path, source_ids, config.sources)
    try:
        rel = confine_in(config, source_ids or tuple(config.sources), rest)
    except PathOutsideSources as exc:
        raise PathOutsideSources(f"--path: {exc}") from None
    scope = SearchScope(source_ids=tuple(source_ids), collection=collection, path=nfc(rel) or None)
    # `--path .` scopes every source whole: still a scoped search, whose sources are caught up
    places = tuple(Place(sid, scope.path or "") for sid in (source_ids or tuple(config.sources)))
    return Target(scope, scope_label(scope), places)


def scope_label(scope: SearchScope) -> str:
    if scope.path:
        return str(Ref(scope.source_ids[0], scope.path)) if len(scope.source_ids) == 1 else scope.path
    if scope.collection is not None:
        return f"collection {scope.collection}"
    if scope.source_ids:
        return "source " + ", ".join(scope.source_ids)
    return "all sources"


def check_scope_exists(config: Config, store: IndexReader, scope: SearchScope) -> None:
    """A --path or --collection that names nothing is a mistake to report, not an empty answer."""
    if scope.collection is not None:
        entries = store.collections()
        if scope.collection not in {entry.name for entry in entries}:
            # a collection is named by its _meta.yaml, which may differ from its folder's name
            named = sorted({e.name for e in entries if scope.collection in (e.folder, e.folder.rsplit("/", 1)[-1])})
            hint = f"; the folder {scope.collection!r} holds {', '.join(map(repr, named))}" if named else ""
            if not named:
                hint = _like_collection(scope.collection, sorted({e.name for e in entries}))
            raise NotesSearchError(
                f"--collection {scope.collection!r}: no such collection{hint} (`notes-search collections` lists them)"
            )
    check_path_exists(config, store, scope)


def _like_collection(typed: str, names: list[str]) -> str:
    """ "; did you mean 'Zálohy'?" for `zalohy`: names match as typed, and a search box is
    typed without capitals or accents."""
    import difflib  # only on this error path
    import unicodedata

    def folded(name: str) -> str:
        return "".join(c for c in unicodedata.normalize("NFD", name.casefold()) if not unicodedata.combining(c))

    by_fold: dict[str, list[str]] = {}
    for name in names:
        by_fold.setdefault(folded(name), []).append(name)
    close = by_fold.get(folded(typed)) or [
        name
        for key in difflib.get_close_matches(folded(typed), list(by_fold), n=3, cutoff=0.75)
        for name in by_fold[key]
    ]
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def check_path_exists(config: Config, store: IndexReader | None, scope: SearchScope) -> None:
    """A --path that no selected source has, on disk or in the index, is a typo to report."""
    if scope.path:
        sources = scope.source_ids or tuple(config.sources)
        if not any(has_path(config, store, source_id, scope.path) for source_id in sources):
            raise NotesSearchError(
                f"--path {scope.path!r}: no such file or folder in {', '.join(sources)} (on disk or in the index)"
            )
