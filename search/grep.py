"""Live exact/regex search without the index: always current, no chunking, the cheapest way to
find an exact string (a hostname, a number, an error code).

Workspace sources are searched with ripgrep over exactly the files the index would admit
(same walker, same scope rules), or with Python's `re` when `rg` is not on PATH. Git sources
are searched with `git grep` inside the bare mirror at the indexed revision, so hits agree with
what `show` and `query` see. Patterns always follow `-e` and file names follow `--`: nothing
a user types can become an option. Results are ordered by source, path, line.

What could not be searched (a missing mirror, a folder or file that cannot be read) is
reported with the hits, never silently dropped: "no matches" must mean the text is not there.
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
from dataclasses import dataclass, field
from pathlib import Path

from indexer.collections import nfc
from indexer.config import Config, GitSource, Source, WorkspaceSource
from indexer.errors import BadPattern, NotesSearchError, SourceError
from indexer.filetext import BINARY_PROBE
from indexer.gitenv import git_environment
from indexer.globs import FileSelection, literal_folder
from indexer.sources import workspace
from indexer.store import IndexReader, SearchScope
from search.refs import Ref, away, confine, indexed_rev, root_away

GREP_TIMEOUT = 60.0  # seconds per rg / git process; a runaway backtracking pattern must end
MAX_TEXT_CHARS = 1000  # a matching line longer than this is cut (minified or generated files)
ARGS_BUDGET = 100_000  # characters of file names per rg call, far below ARG_MAX
# one argument of rg or git holds at most 128 KiB (MAX_ARG_STRLEN); a pattern typed or sent by
# an agent is far shorter, and the error line that quotes it stays readable
MAX_PATTERN_CHARS = 10_000

_log = logging.getLogger("notes_search.grep")


@dataclass(frozen=True)
class GrepHit:
    source: str
    path: str
    line: int
    text: str
    rev: str | None  # the commit searched, for git sources
    file: str | None = None  # the file on disk for an editor (search.service.locating); None: only in the mirror

    def to_json(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "ref": str(Ref(self.source, self.path, self.line))}


@dataclass(frozen=True)
class Unsearched:
    """Something grep could not search: a whole source (`path` None), a folder ('dir/') or a file."""

    source: str
    path: str | None
    reason: str

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return f"{Ref(self.source, self.path)} ({self.reason})" if self.path else f"{self.source} ({self.reason})"


class GrepResult(list[GrepHit]):
    """The hits (a plain list to most callers), and what could not be searched."""

    def __init__(self, hits: Iterable[GrepHit] = ()) -> None:
        super().__init__(hits)
        self.unsearched: list[Unsearched] = []
        self.searched = 0  # sources searched at least in part

    def merge(self, other: GrepResult) -> None:
        self.extend(other)
        self.unsearched += other.unsearched
        self.searched += other.searched

    def check_searched(self) -> None:
        """Raise when nothing at all could be searched: an empty answer would be a lie."""
        if self.searched == 0 and self.unsearched:
            raise NothingSearched("nothing could be searched: " + summary(self.unsearched))


class NothingSearched(SourceError):
    """Every selected source, folder or file failed; there is no answer to give."""


SUMMARY_ITEMS = 3


def summary(unsearched: Sequence[Unsearched], limit: int = SUMMARY_ITEMS) -> str:
    """One line: the first few items, then how many more."""
    text = "; ".join(str(item) for item in unsearched[:limit])
    more = len(unsearched) - limit
    return text + (f"; and {more} more" if more > 0 else "")


@dataclass
class _Problems:
    """What one source's search could not read, filled in while its hits stream."""

    files: list[tuple[str, str]] = field(default_factory=list)  # (index path, reason)
    folders: list[tuple[str, str]] = field(default_factory=list)  # (index path + '/', reason)


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


_OS_ERROR_SUFFIX = re.compile(r"\s*\(os error \d+\)$")
_IO_ERROR_PREFIX = re.compile(r"^IO error for operation on .*?: ")


def _reason(text: str) -> str:
    """'Permission denied (os error 13)' -> 'permission denied' (rg's and the OS's wording)."""
    text = _IO_ERROR_PREFIX.sub("", _OS_ERROR_SUFFIX.sub("", text.strip()))
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def _file_errors(stderr: str, names: dict[str, str]) -> tuple[list[tuple[str, str]], str]:
    """Split rg's (or the fallback's) messages into per-file errors, as (index path, reason),
    and the rest. A file error starts a line as `[rg: ]NAME: REASON`, NAME one we passed (it
    may hold a newline itself, so names are looked for, not lines split)."""
    errors: list[tuple[str, str]] = []
    spans: list[tuple[int, int]] = []
    for disk, rel in names.items():
        marker = disk + ": "
        start = 0
        while (at := stderr.find(marker, start)) != -1:
            if at == 0 or stderr[at - 1] == "\n" or stderr[max(0, at - 4) : at] == "rg: ":
                end = stderr.find("\n", at + len(marker))
                end = len(stderr) if end == -1 else end
                errors.append((rel, _reason(stderr[at + len(marker) : end])))
                spans.append((at, end))
                break
            start = at + 1
    rest = stderr
    for at, end in sorted(spans, reverse=True):
        rest = rest[:at] + rest[end:]
    return errors, "\n".join(ln for ln in rest.splitlines() if ln.strip() and ln.strip() != "rg:")


class _ToolFailed(Exception):
    """rg or git exited with an error; the caller knows what its messages mean."""

    def __init__(self, stderr: str) -> None:
        super().__init__(stderr)
        self.stderr = stderr


def _stream(cmd: list[str], cwd: Path | None) -> Iterator[bytes]:
    """stdout lines of a grep-like tool (exit 0 = hits, 1 = none, anything else = _ToolFailed).

    The caller may stop early (the process is then killed). stderr goes to a file so a chatty
    tool can never block on a full pipe. Messages are forced to English for parsing; git runs
    with the one git environment (a hook's GIT_DIR must not point it at another repository).
    """
    env = git_environment(LC_ALL="C.UTF-8")
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env)
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


def _invalid(patterns: Sequence[str], reason: str) -> BadPattern:
    shown = patterns[0] if len(patterns) == 1 else " / ".join(patterns)
    return BadPattern(f"invalid regex {shown!r}: {reason}")


def _e_options(patterns: Sequence[str]) -> list[str]:
    """`-e P` per pattern: rg and git grep both match a line that matches any of them."""
    return [arg for pattern in patterns for arg in ("-e", pattern)]


def _python_regex(patterns: Sequence[str], fixed: bool) -> str:
    """The patterns as one Python regex, matching where any of them does."""
    return "|".join(f"(?:{re.escape(p) if fixed else p})" for p in patterns)


# ---- workspace sources ----------------------------------------------------------------------


UNLISTABLE = "cannot list folder %s: %s"  # the walker's message for a folder it cannot read


class _WalkLog(logging.Handler):
    """Collects the folders the walker could not list (it reports them only to its log, as
    (on-disk path, reason)) and passes every record on to grep's own log."""

    def __init__(self, root: str, problems: _Problems) -> None:
        super().__init__()
        self.root = root
        self.problems = problems

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == UNLISTABLE and isinstance(record.args, tuple) and len(record.args) == 2:
            rel = nfc(os.path.relpath(str(record.args[0]), self.root)).replace(os.sep, "/")
            self.problems.folders.append(("" if rel == "." else rel + "/", _reason(str(record.args[1]))))
        _log.handle(record)


def _workspace_files(source: WorkspaceSource, folder: str, problems: _Problems) -> list[tuple[str, str]]:
    """(index path, name on disk relative to the root) of the files the index would admit below
    `folder` ('' = all), sorted by index path. The two differ for names stored NFD (macOS):
    the tools must open the disk name and report the index path. Folders that cannot be
    listed go to `problems`.

    The walk itself is narrowed to `folder`, so a --path search does not walk the whole tree.
    """
    walked = dataclasses.replace(source, selection=source.selection.within(nfc(folder))) if folder else source
    root = os.fspath(source.root)
    # a logger of its own, outside the registry: concurrent greps (MCP threads) stay apart
    walk_log = logging.Logger("notes_search.grep.walk")  # noqa: LOG001
    walk_log.addHandler(_WalkLog(root, problems))
    return sorted((item.rel, os.path.relpath(item.path, root)) for item in workspace.list_files(walked, log=walk_log))


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
_PYTHON_GREP = rf"""
import re, sys
matcher = re.compile(sys.argv[2], re.IGNORECASE if sys.argv[1] == "i" else 0)
out, err = sys.stdout.buffer, sys.stderr.buffer
failed = False
for name in sys.argv[3:]:
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as exc:
        if not isinstance(exc, FileNotFoundError):
            err.write(name.encode("utf-8", "surrogateescape") + b": " + (exc.strerror or str(exc)).encode() + b"\n")
            failed = True
        continue
    if b"\0" in data[:{BINARY_PROBE}]:
        continue
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    for number, raw in enumerate(lines, 1):
        if matcher.search(raw.decode("utf-8", "replace").rstrip("\r")):
            out.write(name.encode("utf-8", "surrogateescape") + b"\0" + str(number).encode() + b":" + raw + b"\n")
sys.exit(2 if failed else 0)
"""


def _search_files(
    source: WorkspaceSource,
    files: Sequence[tuple[str, str]],
    patterns: Sequence[str],
    ignore_case: bool,
    fixed: bool,
    rg: str | None,
    problems: _Problems,
) -> Hits:
    """rg (or the Python fallback) over the files, in batches; hits carry index paths, files
    that cannot be read go to `problems`."""
    if rg is not None:
        flags = [
            "--no-config",
            "--no-heading",
            "--with-filename",
            "--line-number",
            "--null",
            "--color=never",
            "--sort=path",
            "--engine=auto",
        ]
        flags += ["--ignore-case"] if ignore_case else ["--case-sensitive"]
        if fixed:
            flags.append("--fixed-strings")
        prefix = [rg, *flags, *_e_options(patterns), "--"]
    else:
        for pattern in patterns:  # an invalid regex is one clear line, here
            _check_pattern(pattern, ignore_case, fixed)
        prefix = [sys.executable, "-c", _PYTHON_GREP, "i" if ignore_case else "c", _python_regex(patterns, fixed)]
    index_path = {os.fsencode(disk): rel for rel, disk in files}
    by_name = {disk: rel for rel, disk in files}
    for batch in _batches([disk for _, disk in files]):
        try:
            for raw in _records(_stream([*prefix, *batch], source.root)):
                name, sep, rest = raw.partition(b"\0")
                number, colon, text = rest.partition(b":")
                if not sep or not colon or not number.isdigit() or name not in index_path:
                    continue  # "binary file matches" notes and the like
                yield GrepHit(source.id, index_path[name], int(number), _clip(text), None)
        except _ToolFailed as exc:
            # exit 2: files that could not be read (searched all the same: the rest is
            # complete), or a pattern error, which comes before any file is read
            failed, other = _file_errors(exc.stderr, by_name)
            if other and not failed:
                raise _invalid(patterns, _one_line(exc.stderr)) from None
            # a file deleted since the walk has nothing left to search: not a miss
            problems.files += [(rel, reason) for rel, reason in failed if reason != "no such file or directory"]


def _check_pattern(pattern: str, ignore_case: bool, fixed: bool) -> None:
    """What the Python fallback will compile; an invalid regex becomes one clear line."""
    try:
        re.compile(re.escape(pattern) if fixed else pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise _invalid([pattern], f"{exc.msg} at position {exc.pos}") from None


# ---- git sources ----------------------------------------------------------------------------


def _pathspecs(scope: FileSelection, folder: str) -> list[str]:
    """A superset of the admitted files as literal pathspecs; exact scope is applied afterwards."""
    if folder:
        return [f":(literal){folder}"]
    prefixes = [literal_folder(glob) for glob in scope.paths]
    if "" in prefixes:  # a pattern that may match anywhere (`**`, or `notes.md` at any depth)
        return []
    return [f":(literal){prefix}" for prefix in sorted(set(prefixes))]


def _git_grep(
    source: GitSource, rev: str, folder: str, patterns: Sequence[str], ignore_case: bool, fixed: bool
) -> Hits:
    """`git grep` in the mirror at `rev`: PCRE like rg, or POSIX ERE where git lacks PCRE."""
    syntax = ["-F"] if fixed else ["-P", "-E"]
    while True:
        cmd = [
            "git",
            "--git-dir",
            str(source.mirror),
            "grep",
            "-n",
            "-I",
            "-z",
            "--no-color",
            "--no-column",
            syntax[0],
            *(["-i"] if ignore_case else []),
            *_e_options(patterns),
            rev,
            "--",
            *_pathspecs(source.selection, folder),
        ]
        try:
            yield from _git_lines(source, rev, folder, cmd)
            return
        except _ToolFailed as exc:
            if "USE_LIBPCRE" in exc.stderr and len(syntax) > 1:
                syntax.pop(0)
                continue
            reason = _one_line(exc.stderr)
            for where in ("-e option", "command line"):  # how PCRE and POSIX errors name the pattern
                for pattern in patterns:
                    if reason.startswith(f"{where}, '{pattern}': "):
                        raise _invalid([pattern], reason.removeprefix(f"{where}, '{pattern}': ")) from None
            from indexer.sources import git as git_source  # pygit2 loads only on this failure path

            if git_source.note_git_failure(source, exc.stderr) is not None:
                reason += "; the mirror is damaged: the next `notes-search sync` clones it again"
            raise SourceError(f"git source {source.id!r}: git grep failed: {reason}") from None


def _git_lines(source: GitSource, rev: str, folder: str, cmd: list[str]) -> Hits:
    prefix = rev.encode() + b":"
    scope = source.selection.within(folder)
    for raw in _records(_stream(cmd, None)):
        name, _, rest = raw.partition(b"\0")
        number, _, text = rest.partition(b"\0")
        path = name.removeprefix(prefix).decode("utf-8", errors="replace")
        if not number.isdigit() or not scope.admits(path):
            continue
        yield GrepHit(source.id, path, int(number), _clip(text), rev)


# ---- entry point ----------------------------------------------------------------------------


def _source_hits(
    store: IndexReader | None,
    source: Source,
    folder: str,
    patterns: Sequence[str],
    ignore_case: bool,
    fixed: bool,
    rg: str | None,
    problems: _Problems,
) -> tuple[Hits, int]:
    """The source's hits and how many files they come from (git: -1, unknown and not needed)."""
    if isinstance(source, GitSource):
        return _git_grep(source, indexed_rev(store, source), folder, patterns, ignore_case, fixed), -1
    if (
        store is not None
        and root_away(os.fspath(source.root))
        and store.scope_stats(SearchScope(source_ids=(source.id,)))
    ):
        # an empty mount point holds no match, and saying so would hide the drive not mounted
        # (a folder emptied on purpose, and synced so, has no indexed file left: it is searched)
        raise SourceError(f"workspace source {source.id!r}: {away(source)}")
    files = _workspace_files(source, folder, problems)
    return _search_files(source, files, patterns, ignore_case, fixed, rg, problems), len(files)


def grep(
    config: Config,
    store: IndexReader | None,
    pattern: str | Sequence[str],
    *,
    source_ids: Iterable[str] = (),
    path: str | None = None,
    ignore_case: bool = False,
    fixed: bool = False,
    max_count: int = 200,
) -> GrepResult:
    """Up to `max_count` lines matching `pattern` (or any of several, as `rg -e A -e B`) across
    the selected sources (all when none are named).

    `path` is a file or a folder (recursive), relative to each source root and confined to it.
    A source that cannot be searched (git never synced or its mirror gone, missing folder), and
    folders and files that cannot be read, are listed in `unsearched` and logged; the others
    are searched all the same. Callers decide with `check_searched()` whether any answer is left.
    """
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    for one in patterns:
        if "\0" in one:
            # no argument of rg or git can carry one, and a note holding one is skipped as binary
            raise BadPattern("a pattern cannot contain a NUL byte")
        if "\n" in one or "\r" in one:
            # rg and git would take each line for a pattern of its own: "a\nb" found every line
            # with an a or a b, and "\n" every line, where a match across lines was asked for
            raise BadPattern(
                "a pattern cannot span lines: grep matches one line at a time (give alternatives as patterns of their own)"
            )
        if len(one) > MAX_PATTERN_CHARS:
            raise BadPattern(f"a pattern of {len(one)} characters is too long (at most {MAX_PATTERN_CHARS})")
    selected = [config.source(source_id) for source_id in dict.fromkeys(source_ids)] or list(config.sources.values())
    rg = shutil.which("rg")
    result = GrepResult()
    for source in selected:
        folder = confine(config, source.id, path) if path else ""
        problems = _Problems()
        try:
            found, file_count = _source_hits(store, source, folder, patterns, ignore_case, fixed, rg, problems)
            for hit in found:
                result.append(hit)
                if len(result) >= max_count:
                    found.close()  # stop rg / git now, not when garbage collected
                    result.searched += 1
                    return result
        except SourceError as exc:
            _log.warning("grep: cannot search source %s: %s", source.id, exc)
            result.unsearched.append(Unsearched(source.id, None, str(exc)))
            continue
        for rel, reason in [*problems.folders, *problems.files]:
            _log.warning("grep: cannot search %s:%s: %s", source.id, rel or "./", reason)
            result.unsearched.append(Unsearched(source.id, rel or "./", reason))
        # a folder whose every file (and every subfolder) failed was not searched at all
        if file_count < 0 or file_count > len(problems.files) or not (problems.files or problems.folders):
            result.searched += 1
    return result
