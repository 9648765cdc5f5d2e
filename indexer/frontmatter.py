"""Front matter: the `---` block at the top of a note, read as YAML and, when that fails, line by line.

Pure (no I/O). A block is a first line `---` up to the next `---`/`...` line.

* Safe YAML (dates kept as written) that loads to a mapping: its fields are the note's metadata.
  A top-level key written twice is a problem; the first value wins (the one a reader meets
  first, and the one the line-by-line reading below keeps too).
* YAML that does not load (`title: Monitoring: Prometheus`, a tab, a stray quote) is a problem,
  and the block is read leniently as Obsidian does: `key: value` lines, `key: [a, b]` lists, and
  `key:` followed by `- item` lines. Tags and dates are not lost to one bad line.
* YAML that loads to something else (a string, a list) was never front matter: plain markdown.

Either way a block that is front matter is metadata, never chunk text or a snippet.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # PyYAML is imported when a block is parsed: a sync that reads no note skips it
    import yaml

SHOWN_KEY_CHARS = 60  # a key quoted in a problem line: a 1 MB key must not make a 1 MB warning

MAX_DUPLICATES_NAMED = 3  # in one problem line; the rest are counted

# `key: value` as Obsidian reads a property line: a key at the start of the line, up to the first
# ":", which a blank or the line's end follows. No two parts can take the same characters, so a
# long line is matched in linear time (surrounding blanks are stripped afterwards).
_PROPERTY = re.compile(r"([^\s#\-:][^:]*):(?:[ \t](.*))?")
_LIST_ITEM = re.compile(r"[ \t]*-[ \t](.*)")


@functools.cache
def _loader_class() -> Any:
    """The loader, made on the first note with front matter. libyaml when available: several
    times faster, and it caps nesting depth itself."""
    import yaml

    class FrontMatterLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        """safe_load semantics, except timestamps stay strings as written (`updated` is verbatim)."""

    FrontMatterLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_written)
    return FrontMatterLoader


def _timestamp_as_written(loader: yaml.constructor.SafeConstructor, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


@dataclass(frozen=True)
class FrontMatter:
    fields: dict[object, object]
    end: int  # first line after the block; 0 when the file has none
    is_metadata: bool  # False: no block, or one that is plain markdown
    problem: str | None = None  # what is wrong with the block, for the sync's warning and `status`


NO_FRONT_MATTER = FrontMatter({}, 0, is_metadata=False)


def read_front_matter(lines: Sequence[str]) -> FrontMatter:
    """The front matter of a note split into lines (BOM and CRLF already dropped)."""
    if not lines or lines[0].rstrip() != "---":
        return NO_FRONT_MATTER
    close = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None)
    if close is None:
        return NO_FRONT_MATTER
    block = lines[1:close]
    try:
        data, duplicates = _load(block)
    except Exception as exc:  # noqa: BLE001 - besides YAMLError, explicit tags (`!!int ""`) raise
        # ValueError/IndexError/... and deep nesting RecursionError: all mean "broken".
        fields, repeated = _read_leniently(block)
        problem = f"invalid YAML{_where(exc)}: {_why(exc)}; read as `key: value` lines"
        if repeated:
            problem += "; " + _duplicates_line(repeated)
        return FrontMatter(fields, close + 1, is_metadata=True, problem=problem)
    if data is None:
        return FrontMatter({}, close + 1, is_metadata=True)
    if isinstance(data, dict):
        return FrontMatter(data, close + 1, is_metadata=True, problem=_duplicates_line(duplicates) or None)
    return NO_FRONT_MATTER


def _load(block: Sequence[str]) -> tuple[object, list[tuple[str, int, int]]]:
    """The block's YAML data with a top-level key written twice kept at its first value, and
    those keys as (key, first line, repeated line), 1-based in the file."""
    import yaml  # loaded once a note has front matter

    loader = _loader_class()("\n".join(block))
    try:
        node = loader.get_single_node()
        if node is None:
            return None, []
        duplicates = _drop_repeated_keys(node) if isinstance(node, yaml.MappingNode) else []
        return loader.construct_document(node), duplicates
    finally:
        loader.dispose()


def _drop_repeated_keys(node: yaml.MappingNode) -> list[tuple[str, int, int]]:
    import yaml  # loaded already: only _load calls this

    first_line: dict[tuple[str, str], int] = {}
    duplicates = []
    kept = []
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            identity = (key_node.tag, key_node.value)
            line = key_node.start_mark.line + 2  # the block starts on the file's second line
            if identity in first_line:
                duplicates.append((key_node.value, first_line[identity], line))
                continue
            first_line[identity] = line
        kept.append((key_node, value_node))
    node.value = kept
    return duplicates


def _read_leniently(block: Sequence[str]) -> tuple[dict[object, object], list[tuple[str, int, int]]]:
    """`key: value` lines as text, `key: [a, b]` and `key:` + `- item` lines as lists; anything
    else (indented lines, an unclosed `[`, a `{` mapping, tags, anchors) is passed over. A key written twice
    keeps its first value."""
    fields: dict[object, object] = {}
    first_line: dict[str, int] = {}
    repeated: list[tuple[str, int, int]] = []
    items: list[object] | None = None  # the list that `- item` lines extend, after an empty `key:`
    for number, line in enumerate(block, start=2):
        item = _LIST_ITEM.fullmatch(line)
        if item is not None and items is not None:
            if text := _unquoted(item.group(1).strip()):
                items.append(text)
            continue
        items = None
        prop = _PROPERTY.fullmatch(line)
        if prop is None:
            continue
        key, value = prop.group(1).rstrip(), (prop.group(2) or "").strip()
        if key in first_line:
            repeated.append((key, first_line[key], number))
            continue
        if value.startswith(("{", "!", "&", "*")) or (value.startswith("[") and not value.endswith("]")):
            continue  # a mapping, a tag, an anchor or alias, an unclosed list: likely what broke the YAML
        first_line[key] = number
        if not value:
            items = []
            fields[key] = items
        elif value.startswith("["):
            fields[key] = [_unquoted(part.strip()) for part in value[1:-1].split(",") if part.strip()]
        else:
            fields[key] = _unquoted(value)
    return {key: (value or None) if isinstance(value, list) else value for key, value in fields.items()}, repeated


def _unquoted(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _where(exc: BaseException) -> str:
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return ""
    return f" (line {mark.line + 2}, column {mark.column + 1})"  # the block starts on line 2


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    lines = str(exc).splitlines()
    return _shown(str(getattr(exc, "problem", None) or (lines[0] if lines else type(exc).__name__)))


def _duplicates_line(duplicates: Sequence[tuple[str, int, int]]) -> str:
    """E.g. "duplicate key 'title' (lines 2 and 6): the first value is used"."""
    if not duplicates:
        return ""
    named = [f"{_shown(key)!r} (lines {first} and {again})" for key, first, again in duplicates[:MAX_DUPLICATES_NAMED]]
    if len(duplicates) > MAX_DUPLICATES_NAMED:
        named.append(f"{len(duplicates) - MAX_DUPLICATES_NAMED} more")
    if len(duplicates) == 1:
        return f"duplicate key {named[0]}: the first value is used"
    return f"duplicate keys {', '.join(named)}: the first values are used"


def _shown(text: str) -> str:
    return text if len(text) <= SHOWN_KEY_CHARS else text[: SHOWN_KEY_CHARS - 1] + "…"
