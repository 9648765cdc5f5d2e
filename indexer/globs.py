"""Path globs for source scoping: `**` spans folders, `*` and `?` stay inside one segment."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str]:
    pattern = pattern.strip("/")
    parts: list[str] = []
    segments = pattern.split("/")
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            # zero or more whole segments; as the last segment it matches everything below
            parts.append(".*" if last else "(?:[^/]*/)*")
            continue
        body = ""
        for ch in segment:
            if ch == "*":
                body += "[^/]*"
            elif ch == "?":
                body += "[^/]"
            else:
                body += re.escape(ch)
        parts.append(body if last else body + "/")
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


def match(pattern: str, path: str) -> bool:
    """True if `path` ('/'-separated, relative) matches `pattern`.

    A pattern without '/' (like `*.md`) matches the file name at any depth, as in .gitignore.
    """
    if "/" not in pattern.strip("/") and pattern != "**":
        return _compile(pattern).match(path.rsplit("/", 1)[-1]) is not None
    return _compile(pattern).match(path) is not None


def match_any(patterns: tuple[str, ...] | list[str], path: str) -> bool:
    return any(match(p, path) for p in patterns)


def literal_folder(pattern: str) -> str:
    """The '/'-separated part of `pattern` before its first wildcard segment: every path the
    pattern matches is it or lies below it (walkers prune elsewhere, git narrows by it as a pathspec).

    '' when the pattern starts with a wildcard or has no '/' at all: such a pattern (`notes.md`,
    `*.md`) matches a file name at any depth (see `match`), so no folder can be ruled out."""
    if "/" not in pattern.strip("/"):
        return ""
    return "/".join(_literal_segments(pattern))


def _literal_segments(pattern: str) -> list[str]:
    """The segments of `pattern` before its first one with a wildcard."""
    parts: list[str] = []
    for segment in pattern.strip("/").split("/"):
        if any(ch in segment for ch in "*?["):
            break
        parts.append(segment)
    return parts


@dataclass(frozen=True)
class FileSelection:
    """Which files of a source are indexed: `paths` gates, then `include` admits, and `exclude`
    wins over both (so one exclude line can take out a folder the other two let in)."""

    paths: tuple[str, ...] = ("**",)
    include: tuple[str, ...] = ("*.md",)
    exclude: tuple[str, ...] = ()
    under: str = ""  # restrict to one file or folder (a scoped re-index); '' = everything

    def within(self, path: str) -> FileSelection:
        return FileSelection(self.paths, self.include, self.exclude, path.strip("/"))

    def _in_under(self, path: str) -> bool:
        return not self.under or path == self.under or path.startswith(self.under + "/")

    def admits(self, path: str) -> bool:
        return (
            self._in_under(path)
            and match_any(self.paths, path)
            and match_any(self.include, path)
            and not match_any(self.exclude, path)
            and not self._in_excluded_folder(path)
        )

    def _in_excluded_folder(self, path: str) -> bool:
        """An exclude pattern that matches a folder (`archive/*` matches `archive/`) excludes
        everything below it: the walkers prune such folders (may_contain), and a git diff, which
        checks files one by one, must reach the same answer."""
        if not self.exclude:
            return False
        parts = path.split("/")[:-1]
        return any(match_any(self.exclude, "/".join(parts[: i + 1]) + "/") for i in range(len(parts)))

    def aims_at(self, folder: str) -> bool:
        """Does a `paths` pattern point into `folder` by its folder part or a leading wildcard?
        False where only bare file names (which match at any depth) could reach it: those say
        nothing about which folders the user meant, so a walker need not warn about them."""
        folder_parts = [p for p in folder.strip("/").split("/") if p]
        for pattern in self.paths:
            prefix = _literal_segments(pattern)
            n = min(len(prefix), len(folder_parts))
            if prefix[:n] == folder_parts[:n]:
                return True
        return False

    def may_contain(self, folder: str) -> bool:
        """Cheap pruning for walkers: can any file below `folder` pass the `paths` gate?"""
        folder_parts = [p for p in folder.strip("/").split("/") if p]
        under_parts = [p for p in self.under.split("/") if p]
        n = min(len(under_parts), len(folder_parts))
        if under_parts[:n] != folder_parts[:n]:
            return False
        if folder and match_any(self.exclude, folder.strip("/") + "/"):
            return False
        for pattern in self.paths:
            prefix = [p for p in literal_folder(pattern).split("/") if p]
            n = min(len(prefix), len(folder_parts))
            if prefix[:n] == folder_parts[:n]:
                return True
        return False
