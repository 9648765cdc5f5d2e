"""How bytes on disk become lines: the binary probe and the line-break rule every reader shares.

The indexer, `show`, MCP `get` and grep must agree on which files are binary and where a line
ends, or a line number from one of them would point at a different line in another.
"""

from __future__ import annotations

BINARY_PROBE = 8192  # a NUL byte within this many leading bytes marks a file as binary
# the Git LFS spec keeps a pointer file below 1024 bytes, its first line naming the spec
LFS_POINTER_MAX_BYTES = 1024
LFS_POINTER_STARTS = (b"version https://git-lfs.github.com/spec/", b"version https://hawser.github.com/spec/")
LFS_POINTER_REASON = "a Git LFS pointer, not the note itself (the content lives in LFS storage)"


# a note may hold a few bytes that are not UTF-8 (a character pasted from a legacy file); past
# this share of its characters it is in another encoding, whose every accented letter or
# Cyrillic word would be lost
MAX_INVALID_SHARE = 0.01


def looks_binary(data: bytes) -> bool:
    """True if `data` has a NUL byte in its first BINARY_PROBE bytes (as grep and rg decide).

    Decoding stays with each reader on purpose: the index takes UTF-8 with at most a few bad
    bytes (`note_text`), while `show` replaces any number of them (the user asked to see that
    file and should see what it holds)."""
    return b"\0" in data[:BINARY_PROBE]


def note_text(data: bytes) -> str | None:
    """The text the index takes of a note that is not binary: UTF-8 without a BOM, line endings
    untouched, a few invalid bytes as U+FFFD (as `show` shows them: the rest of the note stays
    searchable, and U+FFFD is no word); None for a text in another encoding (Latin-1, cp1250,
    UTF-16), which would come out as a row of U+FFFD."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("utf-8-sig", "replace")
    return text if text.count("\ufffd") <= len(text) * MAX_INVALID_SHARE else None


def is_lfs_pointer(data: bytes) -> bool:
    """True for a Git LFS pointer file: what a repository or a checkout without `git lfs pull`
    holds in place of the file. Its text is an object id, never worth a search hit."""
    return len(data) < LFS_POINTER_MAX_BYTES and data.startswith(LFS_POINTER_STARTS) and b"\noid sha256:" in data


def line_break(text: str) -> str:
    """The one rule for where a line ends, shared by the chunker, `show` and MCP `get`: at "\\n"
    (CRLF's "\\r" is then part of the ending), or at "\\r" in a file that has no "\\n" at all
    (old Mac endings: otherwise the whole note would be one line and its title). A lone "\\r"
    inside a "\\n" file stays inside its line, so numbers still match grep -n there."""
    return "\r" if "\n" not in text and "\r" in text else "\n"


def text_lines(text: str) -> list[str]:
    """Lines as the chunker counts them (see `line_break`): at '\\n' as rg and git grep do, or
    at '\\r' in a file with old Mac endings; CRLF lines keep their '\\r'. A final line break
    ends the last line rather than starting an empty one."""
    lines = text.split(line_break(text))
    if lines[-1] == "":
        lines.pop()
    return lines
