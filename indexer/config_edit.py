"""Adding and removing sources in the config file by command, as a careful hand edit would.

The entry is spliced into the text: every other line, comment, quote and indent stays as the
user wrote it. The splice is then checked two ways before anything is written: the new text
must read back as exactly the intended data, and the config loader must accept it. A layout the
splice does not handle (flow-style `{...}` groups) falls back to a round-trip YAML dump, which
keeps comments and key order but may move a comment next to the edit.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from indexer.config import (
    WORKSPACE_GROUPS,
    Config,
    load_config,
    parse_config,
    read_user_file,
)
from indexer.errors import ConfigError

KINDS = ("git", "workspace")


@dataclass(frozen=True)
class ConfigEdit:
    """A checked edit of one config file, not yet written."""

    path: Path  # the file written: a symlinked config is edited where it lives
    old_text: str
    text: str
    config: Config  # the new text, loaded


def add_source(path: Path, kind: str, name: str, entry: dict[str, Any]) -> ConfigEdit:
    """The config with source `name` (`kind` git or workspace, `entry` its keys) added last in its group."""
    target, old_text = _read(path)
    data = _plain(old_text, target)
    taken = [f"sources.{group}.{name}" for group in ("git", *WORKSPACE_GROUPS) if name in _group_of(data, group)]
    if taken:
        raise ConfigError(f"{target}: source {name!r} already exists ({taken[0]}); remove it first")
    group = _workspace_group(data) if kind == "workspace" else "git"
    expected = _with_entry(data, group, name, entry)
    text = _spliced_add(old_text, group, name, entry)
    if text is None or _plain(text, target) != expected:
        text = _round_trip(old_text, lambda doc: _add_to_doc(doc, group, name, entry))
    return _checked(target, old_text, text, expected)


def remove_source(path: Path, name: str) -> ConfigEdit:
    """The config without source `name`: its lines (and the comment lines just above it) go."""
    target, old_text = _read(path)
    data = _plain(old_text, target)
    groups = [group for group in ("git", *WORKSPACE_GROUPS) if name in _group_of(data, group)]
    if not groups:
        raise ConfigError(f"{target}: no source {name!r} in sources.git or sources.workspace")
    group = groups[0]
    expected = dict(data)
    expected["sources"] = _without(data["sources"], group, name)
    text = _spliced_remove(old_text, group, name)
    if text is None or _plain(text, target) != expected:

        def change(doc: Any) -> None:
            doc["sources"] = _without(doc["sources"], group, name)

        text = _round_trip(old_text, change)
    return _checked(target, old_text, text, expected)


def _without(sources: Any, group: str, name: str) -> Any:
    """`sources` without one entry (in place, so a round-trip mapping keeps its comments); a group
    left empty goes, and `sources` left empty is null (`sources:` alone)."""
    del sources[group][name]
    if not sources[group]:
        del sources[group]
    return sources if sources else None


def write_edit(edit: ConfigEdit) -> None:
    """Replace the file atomically (a temporary sibling renamed over it, its mode kept), unless
    someone changed it since it was read: then nothing is written."""
    if read_user_file(edit.path, "config") != edit.old_text:
        raise ConfigError(f"{edit.path}: changed while being edited; nothing written, run the command again")
    mode = os.stat(edit.path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{edit.path.name}.", suffix=".tmp", dir=edit.path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(edit.text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, edit.path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ConfigError(f"{edit.path}: cannot write the config: {exc.strerror or exc}; nothing changed") from None


# ---- reading ---------------------------------------------------------------------------------


def _read(path: Path) -> tuple[Path, str]:
    """The real file behind `path` and its text, after the loader accepted it: a broken config is
    mended by hand first, never edited further."""
    load_config(path)
    target = path.resolve()
    return target, read_user_file(target, "config")


def _plain(text: str, path: Path) -> dict[str, Any]:
    data = yaml.safe_load(text)
    if data is None:
        return {}
    if not isinstance(data, dict):  # the loader refuses this already; kept for the type checker
        raise ConfigError(f"{path}: the config is not a mapping")
    return data


def _group_of(data: dict[str, Any], group: str) -> dict[str, Any]:
    return ((data.get("sources") or {}).get(group)) or {}


def _workspace_group(data: dict[str, Any]) -> str:
    """`workspace`, or `nanobot` where only that spelling of the group is used."""
    sources = data.get("sources") or {}
    return "nanobot" if "nanobot" in sources and "workspace" not in sources else "workspace"


def _with_entry(data: dict[str, Any], group: str, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    sources = dict(data.get("sources") or {})
    sources[group] = {**(sources.get(group) or {}), name: entry}
    return {**data, "sources": sources}


def _checked(path: Path, old_text: str, text: str, expected: dict[str, Any]) -> ConfigEdit:
    if _plain(text, path) != expected:
        raise ConfigError(f"{path}: could not edit this config's layout safely; edit it by hand")
    config = parse_config(text, file=str(path), base=path.parent)
    return ConfigEdit(path, old_text, text, config)


# ---- splicing the text -----------------------------------------------------------------------


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], key_line: int, col: int) -> int:
    """The line after the entry whose key is at (`key_line`, `col`): it goes on while lines are
    indented deeper; a comment at the key's column or left of it belongs to what follows."""
    end = key_line + 1
    for i in range(key_line + 1, len(lines)):
        if not lines[i].strip():
            continue
        if _indent(lines[i]) <= col:
            break
        end = i + 1
    return end


def _comments_above(lines: list[str], key_line: int, col: int) -> int:
    """The first of the comment lines at the key's column directly above it (its own comments)."""
    start = key_line
    while start > 0 and lines[start - 1].lstrip().startswith("#") and _indent(lines[start - 1]) == col:
        start -= 1
    return start


def _rt_load(text: str) -> tuple[Any, int]:
    """The round-trip document (line numbers of every key) and the file's indent step."""
    from ruamel.yaml.util import load_yaml_guess_indent

    _, step, _ = load_yaml_guess_indent(text)
    step = step if isinstance(step, int) and step > 0 else 2
    return _yaml(step).load(text), step


def _is_block(node: Any) -> bool:
    """A block-style mapping whose keys carry line numbers (what the splice edits)."""
    from ruamel.yaml.comments import CommentedMap

    return isinstance(node, CommentedMap) and not node.fa.flow_style()


def _render(name: str, entry: dict[str, Any], step: int, col: int) -> list[str]:
    """`name:` and its keys in block style (lists in flow style), indented to `col`."""
    out = io.StringIO()
    _yaml(step).dump({name: _commented(entry)}, out)
    return [" " * col + line + "\n" if line else "\n" for line in out.getvalue().splitlines()]


_EMPTY_FLOW = re.compile(r"^(\s*[^#]*?:)\s*\{\s*\}(\s*(?:#.*)?\n?)$")  # `git: {}  # c` -> `git:  # c`


def _spliced_add(text: str, group: str, name: str, entry: dict[str, Any]) -> str | None:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    doc, step = _rt_load(text)
    if doc is None:
        doc = {}
    if not _is_block(doc) and doc != {}:
        return None
    sources = doc.get("sources")
    if "sources" not in doc:
        new = ["sources:\n", " " * step + f"{group}:\n", *_render(name, entry, step, 2 * step)]
        return "".join(lines + new)
    if sources is None:  # `sources:` with nothing under it
        at, col = doc.lc.key("sources")
        new = [" " * (col + step) + f"{group}:\n", *_render(name, entry, step, col + 2 * step)]
        return "".join(lines[: at + 1] + new + lines[at + 1 :])
    if not _is_block(sources):
        return None
    members = sources.get(group)
    if group not in sources:
        last_line, col = sources.lc.key(list(sources)[-1])
        at = _block_end(lines, last_line, col)
        new = [" " * col + f"{group}:\n", *_render(name, entry, step, col + step)]
    elif members is None or members == {}:  # `git:` or `git: {}`
        at, col = sources.lc.key(group)
        emptied = _EMPTY_FLOW.sub(r"\1\2", lines[at]) if members == {} else lines[at]
        if members == {} and emptied == lines[at]:
            return None
        lines[at] = emptied
        at += 1
        new = _render(name, entry, step, col + step)
    elif _is_block(members) and members:
        last_line, col = members.lc.key(list(members)[-1])
        at = _block_end(lines, last_line, col)
        new = _render(name, entry, step, col)
    else:
        return None
    return "".join(lines[:at] + new + lines[at:])


def _spliced_remove(text: str, group: str, name: str) -> str | None:
    lines = text.splitlines(keepends=True)
    doc, _ = _rt_load(text)
    sources = doc.get("sources") if _is_block(doc) else None
    members = sources.get(group) if sources is not None and _is_block(sources) else None
    if sources is None or members is None or not _is_block(members):
        return None
    key_line, col = members.lc.key(name)
    start, end = _comments_above(lines, key_line, col), _block_end(lines, key_line, col)
    if len(members) == 1:  # the group's last source: the group line goes too
        group_line, _ = sources.lc.key(group)
        if start != group_line + 1:
            return None
        start = group_line
    return "".join(lines[:start] + lines[end:])


# ---- the round-trip fallback -----------------------------------------------------------------


def _yaml(step: int) -> Any:
    from ruamel.yaml import YAML

    rt = YAML()
    rt.preserve_quotes = True
    rt.width = 4096  # never fold a long path or URL onto a second line
    rt.indent(mapping=step, sequence=step, offset=0)
    return rt


def _commented(entry: dict[str, Any]) -> Any:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    node = CommentedMap()
    for key, value in entry.items():
        if isinstance(value, list):
            value = CommentedSeq(value)
            value.fa.set_flow_style()
        node[key] = value
    return node


def _add_to_doc(doc: Any, group: str, name: str, entry: dict[str, Any]) -> None:
    from ruamel.yaml.comments import CommentedMap

    if doc.get("sources") is None:
        doc["sources"] = CommentedMap()
    if doc["sources"].get(group) is None:
        doc["sources"][group] = CommentedMap()
    doc["sources"][group][name] = _commented(entry)


def _round_trip(text: str, change: Any) -> str:
    from ruamel.yaml.comments import CommentedMap

    doc, step = _rt_load(text)
    if doc is None:
        doc = CommentedMap()
    change(doc)
    out = io.StringIO()
    _yaml(step).dump(doc, out)
    return out.getvalue()
