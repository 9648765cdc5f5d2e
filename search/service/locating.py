"""From a hit to the file on disk: where a note lives (a workspace file, a git source's file in
the user's own checkout), an absolute path taken back as a ref, what `open` opens (a read-only
copy at the indexed rev when a git source has no checkout), and the last query's hits by rank."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from indexer.config import GitSource, Source, WorkspaceSource
from indexer.errors import PathOutsideSources, SourceError
from search.refs import Ref, disk_path

if TYPE_CHECKING:
    from indexer.config import Config
    from search.hits import Hit
    from search.service import NotesService

LINE_TAIL = re.compile(r"(?::[0-9]+){1,2}\Z")  # `:LINE[:COUNT]` after a path, as in a ref
LAST_RESULTS_NAME = "last-query.json"  # beside the index: this config's last `query`, for `open RANK`


def checkout_or_root(source: Source) -> Path | None:
    """The folder the user edits this source's files in: a workspace root, a git checkout."""
    return source.root if isinstance(source, WorkspaceSource) else source.checkout


def file_on_disk(config: Config, source_id: str, path: str) -> str | None:
    """The absolute path of a hit's file for an editor, as spelled on disk (a name stored NFD by
    macOS is not the index's NFC path: an editor given that one opened an empty new file); None
    for a git source without `checkout:` (its `ref` and `rev` name the version in the mirror)."""
    folder = checkout_or_root(config.sources[source_id]) if source_id in config.sources else None
    return os.path.normpath(disk_path(os.path.abspath(folder), path)) if folder is not None else None


def with_files(config: Config, hits: Iterable[Hit]) -> None:
    """Each hit learns its `file` (search results are mutable dataclasses, built per query)."""
    for hit in hits:
        hit.file = file_on_disk(config, hit.source, hit.path)


def ref_of_file(config: Config, text: str) -> str:
    """An absolute path inside a source's folder (what `--format files` prints) as the
    `SOURCE:PATH[:LINE]` ref it names (a file the source leaves out too, for the usual checks to
    say so); relative text unchanged. An absolute path outside every source's folder is refused
    as such: calling it refused for being absolute would be untrue, as those inside are taken."""
    if not text.startswith("/"):
        return text
    tail = LINE_TAIL.search(text)
    path, line = (text[: tail.start()], tail[0]) if tail else (text, "")
    inside: list[str] = []
    for source_id, source in config.sources.items():
        folder = checkout_or_root(source)
        if folder is None:
            continue
        rel = os.path.relpath(os.path.normpath(path), os.path.abspath(folder))
        if rel != ".." and not rel.startswith("../"):
            if source.selection.admits(rel):
                return f"{Ref(source_id, rel)}{line}"
            inside.append(f"{Ref(source_id, rel)}{line}")
    if inside:
        return inside[0]
    raise PathOutsideSources(
        f"{text!r}: outside every source's folder (an absolute path is taken only inside a source's root or checkout)"
    )


# ---- what `open` opens ----------------------------------------------------------------------


@dataclass(frozen=True)
class Opened:
    """The file to hand to an editor, the line to start at, and how it relates to the index."""

    source_id: str
    path: str
    line: int | None
    file: Path
    rev: str | None  # the indexed commit of a git source
    copy: bool  # a read-only temporary copy at `rev` (no checkout configured)
    differs: bool = False  # a checkout's file is not the indexed version: its lines may have moved


def locate(service: NotesService, ref: str) -> Opened:
    """`[SOURCE:]PATH[:LINE]` (or an absolute path inside a source) as a file an editor can open.
    Workspace files are opened in place; a git source's file in its checkout, else as a
    read-only copy of the indexed version in a fresh temporary folder (never the mirror)."""
    from search.refs import confine, indexed_rev, parse_ref, read_text, single_source

    config = service.config
    parsed = parse_ref(ref_of_file(config, ref.strip()), config.sources)
    with service.reading_if_indexed() as store:
        source_id = single_source(config, store, parsed)
        source = config.source(source_id)
        text = read_text(config, store, source_id, parsed.path)  # confined, in scope, a readable file
        rel = confine(config, source_id, parsed.path)
        rev = indexed_rev(store, source) if isinstance(source, GitSource) else None
    if isinstance(source, WorkspaceSource):
        return Opened(source_id, rel, parsed.line, Path(disk_path(os.path.abspath(source.root), rel)), rev, copy=False)
    if source.checkout is not None and os.path.isfile(disk_path(os.fspath(source.checkout), rel)):
        file = Path(disk_path(os.path.abspath(source.checkout), rel))
        return Opened(source_id, rel, parsed.line, file, rev, copy=False, differs=_text_of(file) != text)
    return Opened(source_id, rel, parsed.line, _read_only_copy(rel, text, rev), rev, copy=True)


def _text_of(file: Path) -> str | None:
    """A checkout file's text as `show` decodes it (None when unreadable: then it differs)."""
    try:
        return file.read_bytes().decode("utf-8", errors="replace").removeprefix("\ufeff")
    except OSError:
        return None


def _read_only_copy(rel: str, text: str, rev: str | None) -> Path:
    """The file's text in a new private temporary folder, under its own name (editors pick the
    syntax from it), mode 0444: an edit there would be lost, so the editor says read-only."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=f"notes-search-{(rev or 'copy')[:12]}-"))
    copy = folder / PurePosixPath(rel).name
    copy.write_text(text, encoding="utf-8")
    copy.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    return copy


# ---- the last query's hits, by rank ---------------------------------------------------------


def last_results_path(config: Config) -> Path:
    return config.db.parent / LAST_RESULTS_NAME


def remember_hits(config: Config, query: str, hits: Sequence[Hit]) -> None:
    """Keep the query's refs (at their match lines) for `open RANK`, owner-only. Only where the
    index's folder exists (reading commands create nothing), and silently skipped when it cannot
    be written: remembering is a convenience, the search itself succeeded."""
    import json

    folder = config.db.parent
    if not folder.is_dir():
        return
    from search.querybuild import echoed_query  # named in an error line: a pasted page would be all of it

    data = {"query": echoed_query(query), "refs": [str(Ref(hit.source, hit.path, hit.match_line)) for hit in hits]}
    import threading

    # one writer per process and thread (the warm server answers calls on threads); renamed into place
    tmp = folder / f".{LAST_RESULTS_NAME}.{os.getpid()}.{threading.get_ident()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, ensure_ascii=False)
            os.replace(tmp, last_results_path(config))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError:
        return


def remembered_ref(config: Config, rank: int) -> str:
    """The ref of hit `rank` (1-based) of this config's last `query`."""
    import json

    try:
        data = json.loads(last_results_path(config).read_text(encoding="utf-8"))
        refs = [str(ref) for ref in data["refs"]]
        query = str(data["query"])
    except FileNotFoundError:
        raise SourceError(f"no query to take hit {rank} from: run `notes-search query TEXT` first") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SourceError(f"cannot read the last query's hits ({last_results_path(config)}): {exc}") from None
    if not 1 <= rank <= len(refs):
        have = f"hits 1-{len(refs)}" if refs else "no hits"
        raise SourceError(f"no hit {rank}: the last query ({query!r}) had {have}")
    return refs[rank - 1]
