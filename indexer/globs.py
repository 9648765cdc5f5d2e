"""Path globs for source scoping: `**` spans folders, `*` and `?` stay inside one segment."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache

from indexer.errors import GlobError

# Caps on one glob: far above any pattern a person writes, low enough that a hostile one
# (a prompt-injected tool call) costs little even against every file of a large source.
MAX_GLOB_CHARS = 512
# How a selection reads its patterns; a git source whose index was made under other rules is
# read whole once (a tree diff only sees paths that changed). 2: hidden names are left out.
SELECTION_RULES = 2
MAX_GLOB_SEGMENTS = 32


@dataclass(frozen=True, eq=False)
class _Segment:
    """One '/'-free piece of a glob, as a bit-parallel automaton: bit p of a state set means
    "the first p characters of the piece are matched". Each character of a name updates the
    whole set with a few integer operations, so a piece never backtracks, however many `*`."""

    spans: bool  # `**`: zero or more whole segments
    literal: str | None  # no wildcard: compared as a string
    stars: int  # bits of the positions holding `*`
    anys: int  # bits of the positions holding `?`
    chars: dict[str, int]  # each literal character and the bits where it stands
    accept: int  # the bit of "all of the piece matched"
    # `*` then no wildcard (`*.md`, most pieces): a suffix test, no loop over the name's characters
    suffix: str | None = None

    def matches(self, name: str) -> bool:
        if self.literal is not None:
            return name == self.literal
        if self.suffix is not None:
            return name.endswith(self.suffix)
        chars = self.chars
        state = self._closed(1)
        for char in name:
            state = self._closed(((state & (self.anys | chars.get(char, 0))) << 1) | (state & self.stars))
            if not state:
                return False
        return bool(state & self.accept)

    def _closed(self, state: int) -> int:
        """A `*` may match nothing: being before it is also being after it (one step suffices,
        as runs of `*` are merged into one when the piece is built)."""
        return state | ((state & self.stars) << 1)


def _segment(text: str) -> _Segment:
    if text == "**":
        return _Segment(True, None, 0, 0, {}, 0)
    if "*" not in text and "?" not in text:
        return _Segment(False, text, 0, 0, {}, 0)
    text = re.sub(r"\*+", "*", text)  # `a**b` inside a segment is `a*b`
    stars = anys = 0
    chars: dict[str, int] = {}
    for position, char in enumerate(text):
        if char == "*":
            stars |= 1 << position
        elif char == "?":
            anys |= 1 << position
        else:
            chars[char] = chars.get(char, 0) | 1 << position
    suffix = text[1:] if text.startswith("*") and "*" not in text[1:] and "?" not in text else None
    return _Segment(False, None, stars, anys, chars, 1 << len(text), suffix)


def glob_problem(pattern: str) -> str | None:
    """Why `pattern` is refused as a glob (too long, too many segments), or None."""
    if len(pattern) > MAX_GLOB_CHARS:
        return f"glob is {len(pattern)} characters; at most {MAX_GLOB_CHARS} are allowed"
    segments = pattern.strip("/").count("/") + 1
    if segments > MAX_GLOB_SEGMENTS:
        return f"glob has {segments} '/'-separated segments; at most {MAX_GLOB_SEGMENTS} are allowed"
    return None


@lru_cache(maxsize=512)
def _compile(pattern: str) -> tuple[_Segment, ...]:
    problem = glob_problem(pattern)
    if problem is not None:
        raise GlobError(problem)
    return tuple(_segment(text) for text in pattern.strip("/").split("/"))


def _matches(segments: tuple[_Segment, ...], path: str) -> tuple[bool, int]:
    """Does `path` match, and how much work that took: the characters of path segments fed to
    pieces, each (piece, path segment) pair at most once, so at most pieces x len(path).

    `reach[j]`: the pieces so far can match exactly the first j path segments, each with the
    '/' after it. A plain piece moves j one segment on; `**` opens every later j that still
    leaves a segment; the last piece must take the rest (`**` last takes anything)."""
    names = path.split("/")
    last = len(names) - 1
    reach = [True] + [False] * last
    tries = 0
    for segment in segments[:-1]:
        if segment.spans:
            first = reach.index(True)
            reach = [j >= first for j in range(last + 1)]
            continue
        moved = [False] * (last + 1)
        for j in range(last):
            if reach[j]:
                tries += 1 + len(names[j])
                moved[j + 1] = segment.matches(names[j])
        reach = moved
        if not any(reach):
            return False, tries
    final = segments[-1]
    if final.spans:
        return any(reach), tries
    if not reach[last]:
        return False, tries
    return final.matches(names[last]), tries + 1 + len(names[last])


def match(pattern: str, path: str) -> bool:
    """True if `path` ('/'-separated, relative) matches `pattern`.

    A pattern without '/' (like `*.md`) matches the file name at any depth, as in .gitignore.
    The work is bounded by the pattern's segments times the path's length, never exponential
    (`GlobError` for a pattern past the caps)."""
    return match_counting(pattern, path)[0]


def match_counting(pattern: str, path: str) -> tuple[bool, int]:
    """`match`, and the work it took in characters read (tests pin the bound)."""
    segments = _compile(pattern)
    if "/" not in pattern.strip("/") and pattern != "**":
        return _matches(segments, path.rsplit("/", 1)[-1])
    return _matches(segments, path)


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
    wins over both (so one exclude line can take out a folder the other two let in). Hidden
    names are out unless a pattern names them (see `hidden`)."""

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
            and not self.excluded(path)
            and not self.hidden(path)
        )

    def hidden(self, path: str) -> bool:
        return self.hidden_name(path) is not None

    def hidden_name(self, path: str) -> str | None:
        """The first name on the path that starts with '.' (`.obsidian/`, `.trash/`, `.github/`,
        `.draft.md`) where no `paths` or `include` pattern names it, or None: an editor's
        settings, the notes it deleted and tooling, which a wildcard does not mean (as ripgrep
        and Obsidian skip them)."""
        anywhere, spelled_at = self._named
        parts = path.strip("/").split("/")
        return next(
            (
                part
                for n, part in enumerate(parts)
                if part.startswith(".") and part not in anywhere and "/".join(parts[: n + 1]) not in spelled_at
            ),
            None,
        )

    @cached_property
    def _named(self) -> tuple[frozenset[str], frozenset[str]]:
        """What the `paths` and `include` patterns spell without a wildcard: (names admitted at
        any depth: in a pattern without '/', which matches a file name anywhere, or after a
        wildcard segment; the paths a pattern's literal folder part spells: `a/.old/**` names
        `a/.old`, not `b/.old`)."""
        anywhere: set[str] = set()
        spelled_at: set[str] = set()
        for pattern in (*self.paths, *self.include):
            segments = pattern.strip("/").split("/")
            literal = len(segments) > 1
            for n, segment in enumerate(segments):
                if any(ch in segment for ch in "*?["):
                    literal = False
                elif literal:
                    spelled_at.add("/".join(segments[: n + 1]))
                else:
                    anywhere.add(segment)
        return frozenset(anywhere), frozenset(spelled_at)

    def excluded(self, path: str) -> bool:
        """Taken out by an `exclude` pattern, itself or a folder above it (`PATH/` asks about a
        folder): a choice the user wrote down, so the coverage report does not call it a gap."""
        return match_any(self.exclude, path) or self._in_excluded_folder(path)

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

    def may_contain(self, folder: str, *, hidden_too: bool = False) -> bool:
        """Cheap pruning for walkers: can any file below `folder` pass the `paths` gate?
        `hidden_too`: a hidden folder counts as reachable (where it is still the user's folder)."""
        folder_parts = [p for p in folder.strip("/").split("/") if p]
        under_parts = [p for p in self.under.split("/") if p]
        n = min(len(under_parts), len(folder_parts))
        if under_parts[:n] != folder_parts[:n]:
            return False
        if folder and (match_any(self.exclude, folder.strip("/") + "/") or (self.hidden(folder) and not hidden_too)):
            return False
        for pattern in self.paths:
            prefix = [p for p in literal_folder(pattern).split("/") if p]
            n = min(len(prefix), len(folder_parts))
            if prefix[:n] == folder_parts[:n]:
                return True
        return False
