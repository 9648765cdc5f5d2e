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
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
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
        return dataclasses.asdict(self)


def _clip(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"


def _one_line(stderr: str) -> str:
    """The informative line of a tool's error output ("error: unclosed group", "fatal: ...")."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not set(ln.strip()) <= {"~", "^", " "}]
    for line in lines:
        for prefix in ("error:", "fatal:", "PCRE2:"):
            if line.startswith(prefix):
                return line.removeprefix(prefix).strip()
    return lines[-1] if lines else "unknown error"


def _stream(cmd: list[str], cwd: Path | None, what: str, pattern: str) -> Iterator[bytes]:
    """stdout lines of a grep-like tool (exit 0 = hits, 1 = none, anything else = error).

    The caller may stop early (the process is then killed). stderr goes to a file so a chatty
    tool can never block on a full pipe.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err, env=env)
        except OSError as exc:
            raise SourceError(f"{what}: cannot run {cmd[0]}: {exc}") from None
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
            raise NotesSearchError(f"{what}: no answer within {GREP_TIMEOUT:g} s for pattern {pattern!r}")
        err.seek(0)
        message = _one_line(err.read().decode("utf-8", errors="replace"))
        raise NotesSearchError(f"{what}: pattern {pattern!r}: {message}")


# ---- workspace sources ----------------------------------------------------------------------


def _workspace_files(source: WorkspaceSource, folder: str) -> list[str]:
    """Index paths the index would admit, below `folder` ('' = all), sorted.

    The walk is narrowed to `folder` (so a --path search does not walk the whole tree) and every
    file still has to pass the source's own scope.
    """
    walked = source
    if folder:
        narrow = Scope(paths=(folder, f"{folder}/**"), include=source.scope.include, exclude=source.scope.exclude)
        walked = dataclasses.replace(source, scope=narrow)
    prefix = nfc(folder) + "/"
    return sorted(
        rel for rel, _ in workspace.list_files(walked, log=_log)
        if source.scope.admits(rel) and (not folder or rel == nfc(folder) or rel.startswith(prefix))
    )


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


def _rg(rg: str, source: WorkspaceSource, files: Sequence[str], pattern: str, ignore_case: bool,
        fixed: bool) -> Iterator[GrepHit]:
    flags = ["--no-config", "--no-heading", "--with-filename", "--line-number", "--null", "--color=never",
             "--no-messages", "--sort=path", "--engine=auto"]
    flags += ["--ignore-case"] if ignore_case else ["--case-sensitive"]
    if fixed:
        flags.append("--fixed-strings")
    for batch in _batches(files):
        cmd = [rg, *flags, "-e", pattern, "--", *batch]
        for raw in _stream(cmd, source.root, f"grep in source {source.id!r}", pattern):
            name, sep, rest = raw.partition(b"\0")
            number, colon, text = rest.partition(b":")
            if not sep or not colon or not number.isdigit():
                continue  # "binary file matches" notes and the like
            yield GrepHit(source.id, name.decode("utf-8", errors="replace"), int(number), _clip(text), None)


def compile_pattern(pattern: str, ignore_case: bool, fixed: bool) -> re.Pattern[str]:
    """The Python fallback's matcher; an invalid regex becomes one clear line."""
    try:
        return re.compile(re.escape(pattern) if fixed else pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise NotesSearchError(f"invalid regex {pattern!r}: {exc.msg} at position {exc.pos}") from None


def _python(source: WorkspaceSource, files: Sequence[str], matcher: re.Pattern[str]) -> Iterator[GrepHit]:
    for rel in files:
        try:
            with open(os.path.join(source.root, rel), "rb") as f:
                data = f.read()
        except OSError:
            continue  # vanished or unreadable since the walk, as rg --no-messages
        if b"\0" in data[:BINARY_PROBE]:
            continue
        for number, raw in enumerate(data.split(b"\n"), 1):
            text = raw.decode("utf-8", errors="replace").rstrip("\r")
            if matcher.search(text):
                yield GrepHit(source.id, rel, number, _clip(raw), None)


# ---- git sources ----------------------------------------------------------------------------


def _literal_prefix(glob: str) -> str:
    """The folder part of a glob before its first wildcard ('' when it starts with one)."""
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
              fixed: bool) -> Iterator[GrepHit]:
    cmd = ["git", "--git-dir", str(source.mirror), "-c", "core.quotePath=false", "grep", "-n", "-I", "-z",
           "--no-color", "--no-column", "-F" if fixed else "-P"]
    if ignore_case:
        cmd.append("-i")
    cmd += ["-e", pattern, rev, "--", *_pathspecs(source.scope, folder)]
    prefix = rev.encode() + b":"
    below = folder + "/"
    for raw in _stream(cmd, None, f"git grep in source {source.id!r}", pattern):
        name, _, rest = raw.partition(b"\0")
        number, _, text = rest.partition(b"\0")
        path = name.removeprefix(prefix).decode("utf-8", errors="replace")
        if not number.isdigit() or not source.scope.admits(path):
            continue
        if folder and path != folder and not path.startswith(below):
            continue
        yield GrepHit(source.id, path, int(number), _clip(text), rev)


# ---- entry point ----------------------------------------------------------------------------


def _source_hits(config: Config, store: Store | None, source: Source, folder: str, pattern: str,
                 ignore_case: bool, fixed: bool, rg: str | None) -> Iterator[GrepHit]:
    if isinstance(source, GitSource):
        return _git_grep(source, indexed_rev(store, source), folder, pattern, ignore_case, fixed)
    files = _workspace_files(source, folder)
    if rg is not None:
        return _rg(rg, source, files, pattern, ignore_case, fixed)
    return _python(source, files, compile_pattern(pattern, ignore_case, fixed))


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
            found = _source_hits(config, store, source, folder, pattern, ignore_case, fixed, rg)
            for hit in found:
                hits.append(hit)
                if len(hits) >= max_count:
                    found.close()  # type: ignore[attr-defined]
                    return hits
        except SourceError as exc:
            if explicit:
                raise
            _log.warning("grep: skipping source %s: %s", source.id, exc)
    return hits
