"""The config's sources by command: list them, add one, remove one with what the index keeps
of it (its rows, its TOC, its git mirror) and never the user's own files."""

from __future__ import annotations

import contextlib
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexer.config import (
    BAD_NEW_SOURCE_ID,
    Config,
    GitSource,
    Source,
    is_new_source_id,
    literal_path,
)
from indexer.errors import ConfigError, NotesSearchError, SourceError
from indexer.globs import FileSelection, literal_folder
from indexer.paths import local_repository_path

if TYPE_CHECKING:
    from search.service import NotesService

log = logging.getLogger("notes_search")

REMOVE_LOCK_WAIT = 30.0  # seconds `source remove` waits for a running sync: a person is waiting


def describe(source: Source) -> dict[str, Any]:
    """One source as configured (`source list`)."""
    where: dict[str, Any]
    if isinstance(source, GitSource):
        where = {"url": source.url, "mirror": str(source.mirror), "branch": source.branch}
    else:
        where = {"root": str(source.root)}
    return {
        "id": source.id,
        "kind": source.kind,
        **where,
        "paths": list(source.selection.paths),
        "include": list(source.selection.include),
        "exclude": list(source.selection.exclude),
    }


@dataclass(frozen=True)
class SourceAdded:
    config: Path
    source: Source

    def to_json(self) -> dict[str, Any]:
        return {"added": self.source.id, "config": str(self.config), "source": describe(self.source)}


@dataclass(frozen=True)
class SourceRemoved:
    config: Path
    source: Source
    index_rows_removed: bool  # False: there was no index yet
    mirror_removed: Path | None
    notices: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "removed": self.source.id,
            "kind": self.source.kind,
            "config": str(self.config),
            "index_rows_removed": self.index_rows_removed,
            "mirror_removed": str(self.mirror_removed) if self.mirror_removed else None,
            "notices": list(self.notices),
        }


def _remove_upstream_hook(config: Config, source: GitSource) -> list[str]:
    """The post-receive hook `hooks install --upstream` put into the source's local upstream
    goes with the source: left, every push there ran a sync of a source the config no longer
    has, and logged an error."""
    from hooks.install import upstream_hook

    hook = upstream_hook(config, source)
    if hook is None:
        return []
    try:
        hook.unlink()
    except OSError as exc:
        return [f"its post-receive hook {hook} was kept: {exc.strerror or exc}"]
    return [f"deleted its post-receive hook {hook}"]


def _config_file(config: Config) -> Path:
    if config.path is None:
        raise ConfigError("this config was not read from a file; there is nothing to edit")
    return config.path


def _checked_name(name: str) -> str:
    if not is_new_source_id(name):
        raise NotesSearchError(f"source name {name!r}: {BAD_NEW_SOURCE_ID}")
    return name


@dataclass(frozen=True)
class Selection:
    """What a new source admits, as given on the command line; what is empty stays the loader's
    default (a workspace's `paths`, required by the loader, defaults to the whole folder here)."""

    paths: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def keys(self) -> dict[str, list[str]]:
        given = {"paths": list(self.paths), "include": list(self.include), "exclude": list(self.exclude)}
        return {key: value for key, value in given.items() if value}


def add_git(
    config: Config,
    name: str,
    url: str,
    *,
    branch: str | None,
    mirror: str | None,
    selection: Selection,
) -> SourceAdded:
    """A local repository path (relative to the current folder, as typed) is written absolute, as
    is `mirror`; a URL is written as given. Nothing is fetched until the next sync. A local
    repository must be one, with the branch asked for; a working copy's own folder becomes the
    source's `checkout` (hits open there) and the branch checked out there its `branch`, so
    that a feature branch or a paused rebase later is not what gets indexed."""
    from indexer import config_edit

    local = local_repository_path(url)
    checkout = None
    if local is not None:
        branch, checkout = _local_repository(local, url, branch)
        if not url.startswith("file://"):
            url = literal_path(str(local.resolve()))
    entry: dict[str, Any] = {"url": url}
    if branch:
        entry["branch"] = branch
    if checkout is not None:
        entry["checkout"] = literal_path(str(checkout))
    if mirror:
        entry["mirror"] = literal_path(str(Path(mirror).resolve()))
    entry.update(selection.keys())
    edit = config_edit.add_source(_config_file(config), "git", _checked_name(name), entry)
    _refuse_overlap(config, edit.config.sources[name])
    config_edit.write_edit(edit)
    return SourceAdded(edit.path, edit.config.sources[name])


def _local_repository(path: Path, url: str, branch: str | None) -> tuple[str | None, Path | None]:
    """(the branch to index, the working copy's folder or None for a bare repository) of the
    local repository `path`; NotesSearchError when it is none, or lacks `branch`: every sync
    would fail on it, once a minute under cron."""
    import pygit2

    try:
        repo = pygit2.Repository(str(path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError:
        what = "no such folder" if not path.exists() else "not a git repository"
        raise NotesSearchError(f"{url}: {what}") from None
    try:
        checked_out = None if repo.head_is_detached or repo.head_is_unborn else repo.head.shorthand
        if branch is not None:
            if f"refs/heads/{branch}" not in repo.references:
                raise NotesSearchError(f"{url}: has no branch {branch!r}")
        elif checked_out is None and not repo.is_bare:
            raise NotesSearchError(f"{url}: no branch is checked out there (a detached HEAD): give --branch")
        else:
            branch = checked_out
        # hits open in the working copy only while it shows the branch indexed
        working = None if repo.is_bare or repo.workdir is None or checked_out != branch else Path(repo.workdir)
        return branch, working.resolve() if working is not None else None
    finally:
        repo.free()


def add_workspace(config: Config, name: str, root: str, selection: Selection) -> SourceAdded:
    """`root` must be an existing folder; written absolute. Without --paths the whole folder is
    admitted (`paths: ['**']`), as `init` does."""
    from indexer import config_edit

    folder = Path(root)
    if not folder.is_dir():
        raise NotesSearchError(f"{root}: not a folder")
    entry: dict[str, Any] = {"root": literal_path(str(folder.resolve()))}
    entry.update(selection.keys())
    entry.setdefault("paths", ["**"])
    edit = config_edit.add_source(_config_file(config), "workspace", _checked_name(name), entry)
    added = edit.config.sources[name]
    _refuse_overlap(config, added)
    config_edit.write_edit(edit)
    return SourceAdded(edit.path, added)


def _refuse_overlap(config: Config, added: Source) -> None:
    """A folder another source already indexes from disk (a workspace's root, a git source's
    checkout: the same folder, or one inside or around it that its `paths` reach) would have
    every note found twice, under two names."""
    new_folder = _folder_indexed(added)
    if new_folder is None:
        return
    for other in config.sources.values():
        folder = _folder_indexed(other)
        if folder is None or other.id == added.id:
            continue
        what = f"source {other.id!r} ({folder})"
        if folder == new_folder:
            if _paths_may_meet(added.selection, other.selection):
                raise NotesSearchError(
                    f"{new_folder}: {what} indexes this folder already; each note would be found twice "
                    "(give both sources `paths` that do not meet, or add the folder once)"
                )
            continue
        for outer, outer_folder, inner_folder in (
            (other, folder, new_folder),
            (added, new_folder, folder),
        ):
            if outer_folder not in inner_folder.parents:
                continue
            below = inner_folder.relative_to(outer_folder).as_posix()
            if outer.selection.may_contain(below):
                hint = (
                    f"add `exclude: [{below}/**]` to source {other.id!r} first"
                    if outer is other
                    else f"leave it out with --exclude {shlex.quote(below + '/**')}"
                )
                where = "holds this folder" if outer is other else "lies inside it"
                raise NotesSearchError(
                    f"{new_folder}: {what} {where} and indexes {below}/ already; each note would be found "
                    f"twice ({hint})"
                )


def _folder_indexed(source: Source) -> Path | None:
    """The folder on disk whose files a source indexes (a git source's are read from its mirror,
    but its checkout holds the same notes)."""
    from search.service.locating import checkout_or_root

    folder = checkout_or_root(source)
    return folder.resolve() if folder is not None else None


def _paths_may_meet(first: FileSelection, second: FileSelection) -> bool:
    """Whether two sources on one folder may admit a file both: some `paths` of each lead into
    one folder (`**` leads everywhere; `personal/**` and `work/**` never meet)."""
    return any(second.may_contain(literal_folder(pattern)) for pattern in first.paths)


def remove(service: NotesService, name: str) -> SourceRemoved:
    """In this order, so that a failure loses nothing: the edited config is checked (not yet
    written); under the sync lock the source's rows and TOC leave the index; the config is
    written; the mirror (ours) is deleted. A failure before the write leaves the config as it
    was (the rows come back with the next sync); a mirror that cannot be deleted is a notice."""
    from indexer import config_edit, toc
    from indexer.config import GIT_COLLECTIONS_KEY, SAID_ERROR_KEY, WALKED_FILES_KEY
    from indexer.lock import open_index_lock
    from indexer.sources import git as git_source
    from indexer.store import index_exists, open_store

    config = service.config
    source = config.source(name)
    edit = config_edit.remove_source(_config_file(config), name)
    notices: list[str] = []
    lock = open_index_lock(config)
    if not lock.acquire(timeout=REMOVE_LOCK_WAIT):
        raise NotesSearchError(f"another sync held the lock for {REMOVE_LOCK_WAIT:g} s; nothing changed, try again")
    try:
        rows = index_exists(config.index_location)
        if rows:
            if not lock.claim_source(name, REMOVE_LOCK_WAIT):
                raise NotesSearchError(f"another worker is syncing {name} now; nothing changed, try again")
            store = open_store(config.index_location)
            try:
                store.remove_source(name)
                store.delete_meta(
                    [WALKED_FILES_KEY + name, GIT_COLLECTIONS_KEY + name, SAID_ERROR_KEY + name]
                )  # a source added later by this name walks anew
            finally:
                store.close()
            log.info("source %s removed from the config and the index", name)
        with contextlib.suppress(FileNotFoundError):
            toc.toc_path(config, name).unlink()
        config_edit.write_edit(edit)
        mirror = None
        if isinstance(source, GitSource):
            try:
                mirror = source.mirror if git_source.remove_mirror(source) else None
            except (SourceError, OSError) as exc:
                notices.append(f"the mirror was kept: {exc}")
            notices += _remove_upstream_hook(config, source)
    finally:
        lock.release()
    return SourceRemoved(edit.path, source, rows, mirror, tuple(notices))
