"""The YAML a user writes (the config, `_meta.yaml`): parsed safely, a key written twice an error,
and kept parsed in the cache folder, so a text parsed before loads no PyYAML.

Every one-shot command reads the config and each collection's `_meta.yaml` again, and PyYAML's
import and its pure-Python parse were over a tenth of a lexical query's time. What a text parses
to depends on the text alone, so it is kept under the text's SHA-256 as JSON, next to the text
itself: a file whose text differs (or that is damaged) is not used. Only plain data is kept
(mappings with text keys, lists, text, numbers, booleans, null) and only as written: a document
with shared parts (anchors and aliases) or of unusual size is parsed every time. Errors are never
kept: a broken file is parsed, and fails, every time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

from indexer.cachefolder import cache_folder, write_atomically
from indexer.errors import ConfigError

if TYPE_CHECKING:
    import yaml

FOLDER = "yaml"
KEPT_FILES = 256  # past this the oldest half goes: a user has a few YAML files, a test run many
MAX_NODES = 10_000  # a config or `_meta.yaml` holds tens; beyond this it is parsed every time
MAX_DEPTH = 64


class InvalidYaml(ValueError):
    """A syntax error, worded as PyYAML words it (`str()`), with its 1-based `line` and `column`
    when PyYAML marks one. Raised in place of PyYAML's own error, so that a caller catches it
    without importing PyYAML."""

    def __init__(self, message: str, problem: str | None, line: int | None, column: int | None) -> None:
        super().__init__(message)
        self.problem = problem
        self.line = line
        self.column = column


def load_yaml(text: str, file: str) -> Any:
    """`text` as safe YAML. A key written twice is a ConfigError naming `file`, the key and both
    lines (PyYAML keeps the last one silently); a syntax error is InvalidYaml; nesting too deep
    for the parser is RecursionError."""
    key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    path = cache_folder() / FOLDER / f"{key}.json"
    with contextlib.suppress(OSError, ValueError, RecursionError):
        kept = json.loads(path.read_bytes())
        if isinstance(kept, dict) and kept.get("text") == text and "data" in kept:
            return kept["data"]
    data = _parse(text, file)
    if _plain(data):
        with contextlib.suppress(OSError, ValueError, RecursionError):
            write_atomically(path, json.dumps({"text": text, "data": data}).encode(), durable=False)
            _prune(path.parent)
    return data


def _parse(text: str, file: str) -> Any:
    import yaml  # only for a text not parsed before

    try:
        loader = yaml.SafeLoader(text)  # refuses a character YAML does not allow (a NUL) already
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_duplicate_keys(node, "", file, set())
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:  # the syntax, or a tag the safe loader refuses (`!!python/...`)
        mark = getattr(exc, "problem_mark", None)
        raise InvalidYaml(
            str(exc) or type(exc).__name__,
            getattr(exc, "problem", None),
            mark.line + 1 if mark else None,
            mark.column + 1 if mark else None,
        ) from None


def _check_duplicate_keys(node: yaml.Node, key: str, file: str, seen_nodes: set[int]) -> None:
    """A key written twice is an error naming it and both (1-based) lines: PyYAML keeps the last
    one silently, so a second `db:` far down the file would win unnoticed."""
    import yaml  # loaded already: only _parse calls this

    if id(node) in seen_nodes:  # an alias: its node was checked where the anchor is
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_line: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` entries may be overridden on purpose
            name = f"{key}.{key_node.value}" if key else key_node.value
            line = key_node.start_mark.line + 1
            identity = (key_node.tag, key_node.value)
            if identity in first_line:
                raise ConfigError.at(file, name, f"duplicate key (lines {first_line[identity]} and {line})")
            first_line[identity] = line
            _check_duplicate_keys(value_node, name, file, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_duplicate_keys(item, f"{key}[{index}]", file, seen_nodes)


def _plain(data: Any) -> bool:
    """Whether JSON gives `data` back as it is: plain values, text keys, no part shared (an alias
    bomb's few nodes would be written out as millions), within MAX_NODES and MAX_DEPTH."""
    seen: set[int] = set()
    stack = [(data, 0)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES or depth > MAX_DEPTH:
            return False
        if isinstance(value, (dict, list)):
            if id(value) in seen:
                return False
            seen.add(id(value))
            if isinstance(value, dict):
                if not all(type(k) is str for k in value):
                    return False
                stack.extend((item, depth + 1) for item in value.values())
            else:
                stack.extend((item, depth + 1) for item in value)
        elif value is not None and type(value) not in (str, int, float, bool):
            return False  # dates, binary, sets: JSON would give them back as something else
    return True


def _prune(folder: os.PathLike[str]) -> None:
    """Past KEPT_FILES files, remove the oldest half (by when each was written)."""
    with os.scandir(folder) as it:
        entries = [entry for entry in it if entry.name.endswith(".json")]
    if len(entries) <= KEPT_FILES:
        return
    entries.sort(key=lambda entry: entry.stat().st_mtime)
    for entry in entries[: len(entries) // 2]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.path)
