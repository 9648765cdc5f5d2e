"""Live exact/regex search without the index (SPEC §1 layer 1): always current, no chunking.

Workspace sources are searched with ripgrep over exactly the files the index would admit
(same walker, same scope rules), or with Python's `re` when `rg` is not on PATH. Git sources
are searched with `git grep` inside the bare mirror at the indexed revision, so hits agree with
what `show` and `query` see. Patterns always follow `-e` and file names follow `--`: nothing
a user types can become an option. Results are ordered by source, path, line.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from indexer.collections import nfc
from indexer.config import Config, GitSource, Source, WorkspaceSource
from indexer.errors import NotesSearchError, SourceError
from indexer.globs import Scope
from indexer.sources import workspace
from indexer.store import Store
from search.refs import BINARY_PROBE, confine, indexed_rev

GREP_TIMEOUT = 60.0  # seconds per rg / git process; a runaway backtracking pattern must end
MAX_TEXT_CHARS = 1000  # a matching line longer than this is cut (minified or generated files)
ARGS_BUDGET = 100_000  # characters of file names per rg call, far below ARG_MAX

_log = logging.getLogger("notes_search.grep")


@dataclass(frozen=True)
class GrepHit:
    source: str
    path: str
    line: int
    text: str
    rev: str | None  # the commit searched, for git sources

    def to_json(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "ref": f"{self.source}:{self.path}:{self.line}"}


Hits = Generator[GrepHit, None, None]


def _clip(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"


def _one_line(stderr: str) -> str:
    """The informative line of a tool's error output ("error: unclosed group", "fatal: ...")."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in lines:
        for prefix in ("error:", "fatal:"):
            if line.startswith(prefix):
                return line.removeprefix(prefix).strip()
    return lines[-1] if lines else "failed without a message"


class _ToolFailed(Exception):
    """rg or git exited with an error; the caller knows what its messages mean."""

    def __init__(self, stderr: str) -> None:
        super().__init__(stderr)
        self.stderr = stderr


def _stream(cmd: list[str], cwd: Path | None) -> Iterator[bytes]:
    """stdout lines of a grep-like tool (exit 0 = hits, 1 = none, anything else = _ToolFailed).

    The caller may stop early (the process is then killed). stderr goes to a file so a chatty
    tool can never block on a full pipe. Messages are forced to English for parsing.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C.UTF-8")
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err, env=env)
        except OSError as exc:
            raise _ToolFailed(f"error: cannot run {cmd[0]}: {exc}") from None
        timer = threading.Timer(GREP_TIMEOUT, proc.kill)
        timer.start()
        finished = False
        try:
            assert proc.stdout is not None
            yield from proc.stdout
            finished = True
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
            returncode = proc.wait()
            proc.stdout.close()  # type: ignore[union-attr]
        if not finished or returncode in (0, 1):
            return
        if returncode < 0:
            raise NotesSearchError(f"{cmd[0]} gave no answer within {GREP_TIMEOUT:g} s; narrow the pattern or --path")
        err.seek(0)
        raise _ToolFailed(err.read().decode("utf-8", errors="replace"))


def _records(lines: Iterable[bytes]) -> Iterator[bytes]:
    """Whole `name NUL ...` records: rg, git grep -z and the fallback end every record with a
    newline, so a file name that holds one arrives split over several lines."""
    pending = b""
    for raw in lines:
        if b"\0" not in raw:
            pending += raw
            continue
        yield pending + raw
        pending = b""


def _invalid(pattern: str, reason: str) -> NotesSearchError:
    return NotesSearchError(f"invalid regex {pattern!r}: {reason}")


# ---- workspace sources ----------------------------------------------------------------------


def _workspace_files(source: WorkspaceSource, folder: str) -> list[tuple[str, str]]:
    """(index path, name on disk relative to the root) of the files the index would admit below
    `folder` ('' = all), sorted by index path. The two differ for names stored NFD (macOS):
    the tools must open the disk name and report the index path.

    The walk itself is narrowed to `folder`, so a --path search does not walk the whole tree.
    """
    walked = dataclasses.replace(source, scope=source.scope.within(nfc(folder))) if folder else source
    root = os.fspath(source.root)
    return sorted((item.rel, os.path.relpath(item.path, root)) for item in workspace.list_files(walked, log=_log))


def _batches(files: Sequence[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for name in files:
        if batch and size + len(name) > ARGS_BUDGET:
            yield batch
            batch, size = [], 0
        batch.append(name)
        size += len(name) + 1
    if batch:
        yield batch


# The fallback when `rg` is absent: Python's `re` in a child process, which prints what rg
# prints (name NUL number : line). A child, because a backtracking pattern can run for ever and
# only a process can be stopped (GREP_TIMEOUT); argv: i|c, pattern, file names.
_PYTHON_GREP = r"""
import re, sys
matcher = re.compile(sys.argv[2], re.IGNORECASE if sys.argv[1] == "i" else 0)
out = sys.stdout.buffer
for name in sys.argv[3:]:
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError:
        continue
    if b"\0" in data[:%d]:
        continue
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    for number, raw in enumerate(lines, 1):
        if matcher.search(raw.decode("utf-8", "replace").rstrip("\r")):
            out.write(name.encode("utf-8", "surrogateescape") + b"\0" + str(number).encode() + b":" + raw + b"\n")
""" % BINARY_PROBE


def _search_files(source: WorkspaceSource, files: Sequence[tuple[str, str]], pattern: str, ignore_case: bool,
                  fixed: bool, rg: str | None) -> Hits:
    """rg (or the Python fallback) over the files, in batches; hits carry index paths."""
    if rg is not None:
        flags = ["--no-config", "--no-heading", "--with-filename", "--line-number", "--null", "--color=never",
                 "--no-messages", "--sort=path", "--engine=auto"]
        flags += ["--ignore-case"] if ignore_case else ["--case-sensitive"]
        if fixed:
            flags.append("--fixed-strings")
        prefix = [rg, *flags, "-e", pattern, "--"]
    else:
        _check_pattern(pattern, ignore_case, fixed)  # an invalid regex is one clear line, here
        prefix = [sys.executable, "-c", _PYTHON_GREP, "i" if ignore_case else "c",
                  re.escape(pattern) if fixed else pattern]
    index_path = {os.fsencode(disk): rel for rel, disk in files}
    for batch in _batches([disk for _, disk in files]):
        try:
            for raw in _records(_stream([*prefix, *batch], source.root)):
                name, sep, rest = raw.partition(b"\0")
                number, colon, text = rest.partition(b":")
                if not sep or not colon or not number.isdigit() or name not in index_path:
                    continue  # "binary file matches" notes and the like
                yield GrepHit(source.id, index_path[name], int(number), _clip(text), None)
        except _ToolFailed as exc:
            # --no-messages keeps file errors (a note deleted since the walk) silent but still
            # exits 2; whatever rg does print is about the pattern
            if exc.stderr.strip():
                raise _invalid(pattern, _one_line(exc.stderr)) from None


def _check_pattern(pattern: str, ignore_case: bool, fixed: bool) -> None:
    """What the Python fallback will compile; an invalid regex becomes one clear line."""
    try:
        re.compile(re.escape(pattern) if fixed else pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise _invalid(pattern, f"{exc.msg} at position {exc.pos}") from None


# ---- git sources ----------------------------------------------------------------------------


def _literal_prefix(glob: str) -> str:
    """The folder part of a glob before its first wildcard; '' when it starts with one or has
    no '/' (such a pattern matches a file name at any depth)."""
    if "/" not in glob.strip("/"):
        return ""
    parts: list[str] = []
    for segment in glob.strip("/").split("/"):
        if any(ch in segment for ch in "*?["):
            break
        parts.append(segment)
    return "/".join(parts)


def _pathspecs(scope: Scope, folder: str) -> list[str]:
    """A superset of the admitted files as literal pathspecs; exact scope is applied afterwards."""
    if folder:
        return [f":(literal){folder}"]
    prefixes = [_literal_prefix(glob) for glob in scope.paths]
    if "" in prefixes:
        return []
    return [f":(literal){prefix}" for prefix in sorted(set(prefixes))]


def _git_grep(source: GitSource, rev: str, folder: str, pattern: str, ignore_case: bool,
              fixed: bool) -> Hits:
    """`git grep` in the mirror at `rev`: PCRE like rg, or POSIX ERE where git lacks PCRE."""
    syntax = ["-F"] if fixed else ["-P", "-E"]
    while True:
        cmd = ["git", "--git-dir", str(source.mirror), "grep", "-n", "-I", "-z", "--no-color", "--no-column",
               syntax[0], *(["-i"] if ignore_case else []), "-e", pattern, rev, "--",
               *_pathspecs(source.scope, folder)]
        try:
            yield from _git_lines(source, rev, folder, cmd)
            return
        except _ToolFailed as exc:
            if "USE_LIBPCRE" in exc.stderr and len(syntax) > 1:
                syntax.pop(0)
                continue
            reason = _one_line(exc.stderr)
            for where in ("-e option", "command line"):  # how PCRE and POSIX errors name the pattern
                if reason.startswith(f"{where}, '{pattern}': "):
                    raise _invalid(pattern, reason.removeprefix(f"{where}, '{pattern}': ")) from None
            raise SourceError(f"git source {source.id!r}: git grep failed: {reason}") from None


def _git_lines(source: GitSource, rev: str, folder: str, cmd: list[str]) -> Hits:
    prefix = rev.encode() + b":"
    scope = source.scope.within(folder)
    for raw in _records(_stream(cmd, None)):
        name, _, rest = raw.partition(b"\0")
        number, _, text = rest.partition(b"\0")
        path = name.removeprefix(prefix).decode("utf-8", errors="replace")
        if not number.isdigit() or not scope.admits(path):
            continue
        yield GrepHit(source.id, path, int(number), _clip(text), rev)


# ---- entry point ----------------------------------------------------------------------------


def _source_hits(store: Store | None, source: Source, folder: str, pattern: str,
                 ignore_case: bool, fixed: bool, rg: str | None) -> Hits:
    if isinstance(source, GitSource):
        return _git_grep(source, indexed_rev(store, source), folder, pattern, ignore_case, fixed)
    return _search_files(source, _workspace_files(source, folder), pattern, ignore_case, fixed, rg)


def grep(
    config: Config,
    store: Store | None,
    pattern: str,
    *,
    source_ids: Iterable[str] = (),
    path: str | None = None,
    ignore_case: bool = False,
    fixed: bool = False,
    max_count: int = 200,
) -> list[GrepHit]:
    """Up to `max_count` matching lines across the selected sources (all when none are named).

    `path` is a file or a folder (recursive), relative to each source root and confined to it.
    A source named explicitly must be searchable; when searching everything, a source that
    cannot be searched yet (git never synced, missing folder) is skipped with a log line.
    """
    explicit = list(dict.fromkeys(source_ids))
    selected = [config.source(source_id) for source_id in explicit] or list(config.sources.values())
    rg = shutil.which("rg")
    hits: list[GrepHit] = []
    for source in selected:
        folder = confine(config, source.id, path) if path else ""
        try:
            found = _source_hits(store, source, folder, pattern, ignore_case, fixed, rg)
            for hit in found:
                hits.append(hit)
                if len(hits) >= max_count:
                    found.close()  # stop rg / git now, not when garbage collected
                    return hits
        except SourceError as exc:
            if explicit:
                raise
            _log.warning("grep: skipping source %s: %s", source.id, exc)
    return hits
