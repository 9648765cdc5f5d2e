"""Remembered embedder outages: a search someone waits on tries a down embedder once per
window, not on every call (a refused connection is cheap, but loading the HTTP client and
numpy, or waiting for a server that accepts and never answers, is not).

An outage is kept in memory (a long-lived MCP server) and in a small file next to the index
(one-shot CLI queries learn from the previous one). Only interactive calls record outages, so
a sync always tries with its full retries; any successful embedding clears the outage.
Standard library only: a query checks this before anything heavy is imported.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from indexer.config import Config, EmbeddingConfig
from indexer.errors import EmbedderUnavailable

T = TypeVar("T")

OUTAGE_WINDOW = 45.0  # seconds a failed embedder is left alone by searches
STATE_FILE = ".embedder-outage.json"  # next to the index, like the sync lock


def _key(embedding: EmbeddingConfig) -> str:
    """Outages belong to a server (or the local model), not to one model name."""
    return f"{embedding.provider} {embedding.endpoint or ''}".strip()


class EmbedderHealth:
    """What failed when, for one index folder. Thread-safe; a state file that cannot be read
    or written only costs the sharing between processes."""

    def __init__(
        self, state_file: Path | None, window: float = OUTAGE_WINDOW, clock: Callable[[], float] = time.time
    ) -> None:
        self.state_file = state_file
        self.window = window
        self.clock = clock  # wall clock: the file is shared between processes
        self._lock = threading.Lock()
        self._memory: dict[str, tuple[float, str]] = {}

    def outage(self, embedding: EmbeddingConfig) -> str | None:
        """Why the embedder is left alone now (its last error and when it is tried again), or
        None when it is worth trying."""
        key = _key(embedding)
        now = self.clock()
        with self._lock:
            entry = max([e for e in (self._memory.get(key), self._read().get(key)) if e is not None], default=None)
        if entry is None or not 0 <= now - entry[0] < self.window:
            return None
        retry_in = max(1, round(self.window - (now - entry[0])))
        return f"{entry[1]}; not retried for {retry_in} s"

    def failed(self, embedding: EmbeddingConfig, message: str) -> None:
        key = _key(embedding)
        entry = (self.clock(), message)
        with self._lock:
            self._memory[key] = entry
            state = self._read()
            state[key] = entry
            self._write(state)

    def succeeded(self, embedding: EmbeddingConfig) -> None:
        """Forget an outage (writes only when one was remembered)."""
        key = _key(embedding)
        with self._lock:
            self._memory.pop(key, None)
            state = self._read()
            if key in state:
                del state[key]
                self._write(state)

    def _read(self) -> dict[str, tuple[float, str]]:
        if self.state_file is None:
            return {}
        try:
            raw = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(raw, dict):
            return {}
        state = {}
        for key, value in raw.items():
            if (
                isinstance(value, dict)
                and isinstance(value.get("at"), (int, float))
                and isinstance(value.get("error"), str)
            ):
                state[key] = (float(value["at"]), value["error"])
        return state

    def _write(self, state: dict[str, tuple[float, str]]) -> None:
        """Atomically (temp file + rename), so a concurrent reader sees the old or the new state."""
        if self.state_file is None:
            return
        body = json.dumps({key: {"at": at, "error": error} for key, (at, error) in state.items()})
        try:
            fd, tmp = tempfile.mkstemp(prefix=".embedder-outage-", dir=self.state_file.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(body)
                os.replace(tmp, self.state_file)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass  # a read-only index folder: the outage is remembered in this process only


_health: dict[Path, EmbedderHealth] = {}
_health_lock = threading.Lock()


def embedder_health(config: Config) -> EmbedderHealth:
    """The process's record for the config's index folder (tests adjust its window and clock)."""
    state_file = config.db.parent / STATE_FILE
    with _health_lock:
        health = _health.get(state_file)
        if health is None:
            health = _health[state_file] = EmbedderHealth(state_file)
        return health


def guarded(config: Config, call: Callable[[], T]) -> T:
    """Run an interactive embedding call unless an outage of config.embedding is remembered
    (then EmbedderUnavailable with the outage text, and `call` never runs); a new
    EmbedderUnavailable is remembered, a success forgets the outage. One rule for every caller
    someone waits on (search, route), so they share the outage memory."""
    health = embedder_health(config)
    outage = health.outage(config.embedding)
    if outage is not None:
        raise EmbedderUnavailable(outage)
    try:
        result = call()
    except EmbedderUnavailable as exc:
        health.failed(config.embedding, str(exc))
        raise
    health.succeeded(config.embedding)
    return result
