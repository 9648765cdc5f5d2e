"""Collections: a folder holding `_meta.yaml` is a named, described unit of notes.

The name is stored on every file row (scoping) and the description feeds routing. The folder
walker lives here too, because collection detection and the workspace driver must see exactly
the same folders; the driver imports this module, never the other way round.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.errors import ConfigError
from indexer.globs import FileSelection
from indexer.model import CollectionProblem
from indexer.useryaml import InvalidYaml, load_yaml

META_FILE = "_meta.yaml"

_LOG = logging.getLogger("notes_search.collections")


@dataclass(frozen=True)
class CollectionFolder:
    """A folder holding `_meta.yaml`: its files form one collection named in search results."""

    name: str
    description: str
    tags: tuple[str, ...]
    source_id: str
    folder: str  # relative to the source root, '/'-separated; '' for the root itself


@dataclass(frozen=True)
class WalkedFolder:
    """One folder the walk entered, with the files its scope admits (not yet stat'ed)."""

    rel: str  # relative to the root, '/'-separated, NFC; '' for the root
    path: str  # on-disk path (names as the filesystem spells them, maybe not NFC)
    files: tuple[tuple[str, os.DirEntry[str]], ...]  # (index path, entry), sorted by name
    is_collection: bool  # holds a `_meta.yaml` (whether or not the scope admits that file)
    # why the folder could not be listed (permissions, I/O); its files are then unknown, not gone
    unreadable: str | None = None
    # (index path, why) of entries the scope admits that cannot be indexed (a FIFO, a device, a
    # symlink out of the root or in a loop, a name that is not UTF-8 or collides after NFC)
    skipped: tuple[tuple[str, str], ...] = ()


def nfc(name: str) -> str:
    """Index paths are NFC so that a macOS (NFD) and a Linux checkout give the same path."""
    return name if name.isascii() else unicodedata.normalize("NFC", name)


def _inside(path: str, real_root: str) -> bool:
    target = os.path.realpath(path)
    return target == real_root or target.startswith(real_root.rstrip(os.sep) + os.sep)


def is_utf8_name(name: str) -> bool:
    """False for a file name whose bytes are not UTF-8 (Python keeps them as lone surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def walk_folders(root: Path, scope: FileSelection, log: logging.Logger | None = None) -> Iterator[WalkedFolder]:
    """Yield every folder below `root` that `scope` may reach, parents before children.

    `.git` folders are never entered. A symlink is followed only if its resolved target stays
    inside the resolved root. Symlinked folders are walked after all real ones, so a folder
    reachable both ways is listed under its real path. A folder (keyed by device and inode) is
    entered a second time, under another name, only if its first visit listed no file and no
    `_meta.yaml`: then nothing can be listed twice, and files the scope admits only under the
    link's name (`paths: [view/**]` with `view -> hidden`) are still found. Each folder is
    entered at most twice, so symlink loops end. A folder that cannot be listed is yielded with
    `unreadable` set and no files.
    """
    log = log or _LOG
    real_root = os.path.realpath(root)
    root_stat = os.stat(root)
    visited = {(root_stat.st_dev, root_stat.st_ino)}
    claimed: set[tuple[int, int]] = set()  # folders whose visit listed a file or _meta.yaml
    revisited: set[tuple[int, int]] = set()

    def enter(key: tuple[int, int]) -> bool:
        if key not in visited:
            visited.add(key)
            return True
        if key in claimed or key in revisited:
            return False
        revisited.add(key)
        return True

    # (rel, path, folder key, whether the folder's mode bits leave search permission in doubt)
    stack: list[tuple[str, str, tuple[int, int], bool]] = [
        ("", os.fspath(root), (root_stat.st_dev, root_stat.st_ino), True)
    ]
    linked: list[tuple[str, str]] = []
    while stack or linked:
        if stack:
            rel, path, key, doubtful = stack.pop()
        else:
            rel, path = linked.pop(0)
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if not enter(key):
                continue
            doubtful = _may_lack_search(st)
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
            if entries and doubtful:
                # listing needs read permission, opening what is listed needs search permission
                os.stat(os.path.join(path, "."))
        except OSError as exc:  # not logged here: the caller knows what it keeps instead
            yield WalkedFolder(rel, path, (), False, exc.strerror or str(exc))
            continue
        files: list[tuple[str, os.DirEntry[str]]] = []
        skipped: list[tuple[str, str]] = []
        subdirs: list[tuple[str, str, tuple[int, int], bool]] = []
        is_collection = False
        unsearchable: str | None = None
        winners = _normalisation_winners(entries)
        for entry in entries:
            undecodable = not is_utf8_name(entry.name)
            # an index path must be text: a name that is not UTF-8 is shown with \xff escapes
            name = os.fsencode(entry.name).decode("utf-8", "backslashreplace") if undecodable else nfc(entry.name)
            child = f"{rel}/{name}" if rel else name
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            except OSError as exc:  # vanished, or a symlink loop (ELOOP)
                if exc.errno == errno.ELOOP and scope.admits(child):
                    skipped.append((child, "symlink loop"))
                continue
            is_meta = is_file and entry.name == META_FILE
            admitted = not is_dir and scope.admits(child)
            # relevance first: out-of-root links that would be ignored anyway stay quiet
            if is_dir:
                if entry.name == ".git" or not scope.may_contain(child):
                    continue
            elif not (is_meta or admitted):
                continue
            shown = f"{child}/" if is_dir else child
            if undecodable:
                skipped.append((shown, "its name is not valid UTF-8"))
                continue
            if winners.get(name, entry.name) != entry.name:
                # NFC and NFD spellings of one name map to one index path; indexing both would
                # flip that path between the two files on every sync
                skipped.append(
                    (
                        shown,
                        f"its name (spelled {entry.name!a}) is the same as "
                        f"{winners[name]!a} after Unicode normalisation; only that one is indexed",
                    )
                )
                continue
            if is_link and not _inside(entry.path, real_root):
                # a folder that only a bare file name (`paths: [notes.md]`, any depth) reaches
                # was not aimed at by the user: skipped quietly
                if not is_dir:
                    skipped.append((child, f"symlink whose target is outside {real_root}"))
                elif scope.aims_at(child) and scope.may_contain(child):
                    skipped.append((shown, f"symlink to a folder outside {real_root} (not followed)"))
                continue
            if not is_dir and not is_file:
                if admitted:
                    skipped.append((child, _not_regular(entry, is_link)))
                continue
            if is_file:
                is_collection = is_collection or is_meta
                if admitted:
                    files.append((child, entry))
                continue
            if is_link:
                # a link to this folder or one above it is a loop: what it reaches is listed under
                # its real names already (a walk of the whole root finds that folder claimed, but
                # a walk scoped below it does not, and would list the tree again under the link)
                target = os.path.realpath(entry.path)
                here = os.path.realpath(path)
                if here != target and not here.startswith(target.rstrip(os.sep) + os.sep):
                    linked.append((child, entry.path))
                continue
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            except OSError as exc:  # search permission denied after all (an ACL): nothing here opens
                unsearchable = exc.strerror or str(exc)
                break
            if enter((st.st_dev, st.st_ino)):
                subdirs.append((child, entry.path, (st.st_dev, st.st_ino), _may_lack_search(st)))
        if unsearchable is not None:
            yield WalkedFolder(rel, path, (), False, unsearchable)
            continue
        if files or is_collection:
            claimed.add(key)
        yield WalkedFolder(rel, path, tuple(files), is_collection, skipped=tuple(skipped))
        stack.extend(reversed(subdirs))


def _normalisation_winners(entries: Sequence[os.DirEntry[str]]) -> dict[str, str]:
    """For each NFC name that several entries share, the on-disk name that is indexed: the one
    spelled in NFC, else the first by code point. A deterministic rule, so syncs converge."""
    spellings: dict[str, list[str]] = {}
    for entry in entries:
        if not entry.name.isascii() and is_utf8_name(entry.name):
            spellings.setdefault(nfc(entry.name), []).append(entry.name)
    return {key: key if key in names else min(names) for key, names in spellings.items() if len(names) > 1}


def _not_regular(entry: os.DirEntry[str], is_link: bool) -> str:
    """Why an admitted name that is neither a file nor a folder is skipped (never opened: a FIFO
    would block the read, a device never ends)."""
    try:
        mode = entry.stat().st_mode
    except OSError:
        return "broken symlink" if is_link else "vanished while scanning"
    if stat.S_ISFIFO(mode):
        return "a FIFO, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a regular file"
    return "not a regular file"


def _may_lack_search(st: os.stat_result) -> bool:
    """Folders with every execute bit set are searchable in practice; others get probed."""
    return st.st_mode & 0o111 != 0o111


def _read_file(path: str) -> Callable[[], str]:
    def read() -> str:
        with open(path, encoding="utf-8-sig") as f:
            return f.read()

    return read


def _read_meta(read: Callable[[], str], where: str) -> tuple[dict[str, Any], str | None]:
    """Parse `_meta.yaml`; a broken one reads as empty, with what is wrong (never fatal)."""
    try:
        raw = load_yaml(read(), where)  # the config's safe loader: duplicate keys are errors too
    except (OSError, UnicodeDecodeError, InvalidYaml, ConfigError, RecursionError) as exc:
        problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return {}, f"malformed, the collection takes the folder's name: {problem}"
    if raw is None:
        return {}, None
    if not isinstance(raw, dict):
        return {}, "not a mapping, the collection takes the folder's name"
    return raw, None


def _tags(value: Any) -> tuple[tuple[str, ...], str | None]:
    """`tags` as text or a list of scalars, and what is wrong when it is neither (never its value:
    an alias bomb would make a line of millions of words)."""
    if value is None:
        return (), None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return (), f"`tags` is {_kind(value)}, not text or a list; the collection has no tags"
    tags = tuple(_without_nul(str(tag)) for tag in value if _is_scalar(tag) and str(tag))
    if any(not _is_scalar(tag) and tag is not None for tag in value):
        return tags, "`tags` holds an entry that is not text; it is left out"
    return tags, None


def _text_field(meta: dict[str, Any], key: str) -> tuple[str | None, str | None]:
    """A text field of `_meta.yaml` (None when not given), or what is wrong with it."""
    value = meta.get(key)
    if value is None or isinstance(value, str):
        return value, None
    return None, f"`{key}` is {_kind(value)}, not text"


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    """The YAML kind of a value, for a problem line."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    return f"a {type(value).__name__}"


def _without_nul(text: str) -> str:
    """YAML can spell a NUL ("a\\0b") and PostgreSQL text holds none: it becomes U+FFFD here, at the
    source, so both stores hold the same name and a sync compares what it found with what it stored."""
    return text.replace("\x00", "\ufffd")


def load_collections(
    source_id: str,
    folders: Iterable[WalkedFolder],
    log: logging.Logger | None = None,
    problems: list[CollectionProblem] | None = None,
) -> list[CollectionFolder]:
    """Turn walked folders into collections, in walk order (`collections_of`)."""
    metas = (
        (f.rel, path, _read_file(path))
        for f in folders
        if f.is_collection
        for path in [os.path.join(f.path, META_FILE)]
    )
    return collections_of(source_id, metas, log, problems)


def collections_of(
    source_id: str,
    metas: Iterable[tuple[str, str, Callable[[], str]]],
    log: logging.Logger | None = None,
    problems: list[CollectionProblem] | None = None,
) -> list[CollectionFolder]:
    """A collection per (folder, where its `_meta.yaml` is, a reader of it), in the order given (a
    walk's, on disk or in a git tree); the first claimant keeps a name. What a `_meta.yaml` got wrong
    (broken YAML, a field of the wrong type, a name already taken) is logged and, given
    `problems`, appended to it; a wrong field is never used."""
    log = log or _LOG
    result: list[CollectionFolder] = []
    taken: set[str] = set()
    for rel, where, read in metas:
        meta_path = f"{rel}/{META_FILE}" if rel else META_FILE

        def report(problem: str, meta_path: str = meta_path) -> None:
            log.warning("source %r: %s: %s", source_id, meta_path, problem)
            if problems is not None:
                problems.append(CollectionProblem(meta_path, problem))

        meta, problem = _read_meta(read, where)
        if problem is not None:
            report(problem)
        fallback = rel or source_id
        given_name, wrong = _text_field(meta, "name")
        if wrong is not None:
            report(f"{wrong}; the collection takes the folder's name")
        description, wrong = _text_field(meta, "description")
        if wrong is not None:
            report(f"{wrong}; the collection has no description")
        tags, wrong = _tags(meta.get("tags"))
        if wrong is not None:
            report(wrong)
        name = _without_nul(given_name.strip()) if given_name and given_name.strip() else fallback
        wanted = name
        if name in taken:
            name = fallback
        base, n = name, 2
        while name in taken:
            name, n = f"{base} ({n})", n + 1
        if name != wanted:
            report(f"collection name {wanted!r} is already used, this one is {name!r}")
        taken.add(name)
        result.append(
            CollectionFolder(
                name=name,
                description=_without_nul(description.strip()) if description else "",
                tags=tags,
                source_id=source_id,
                folder=rel,
            )
        )
    return result


def find_collections(
    source_id: str, root: Path, scope: FileSelection, log: logging.Logger | None = None
) -> list[CollectionFolder]:
    """All collections of a workspace source, seen exactly as `workspace.scan` sees them."""
    return load_collections(source_id, walk_folders(root, scope, log), log)


def collection_for(path: str, collections: Sequence[CollectionFolder]) -> str | None:
    """The name of the nearest collection enclosing `path` (a file path), if any."""
    best: CollectionFolder | None = None
    for collection in collections:
        folder = collection.folder
        if (not folder or path.startswith(folder + "/")) and (best is None or len(folder) > len(best.folder)):
            best = collection
    return best.name if best else None
