"""Remembered embedder outages: a search someone waits on tries a down embedder once per
window, not on every call (a refused connection is cheap, but loading the HTTP client and
numpy, or waiting for a server that accepts and never answers, is not); a sync (a cron tick)
tries it again on a back-off schedule, 1, 2, 4 ... up to 30 minutes after its last failure.

An outage is kept in memory (a long-lived MCP server) and in a small file next to the index
(one-shot CLI queries and the next cron tick learn from the previous one; on PostgreSQL it is
the host's data folder, as each host reaches its own embedder). A search's failure keeps
searches away for a window (a sync's does not: a search tries once for itself, briefly); a
sync's failure sets when the next sync tries; `status` tells both. Any successful embedding clears the outage. Standard library only: a query and a
no-op sync check this before anything heavy is imported.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from indexer.config import Config, EmbeddingConfig
from indexer.errors import EmbedderUnavailable

T = TypeVar("T")

OUTAGE_WINDOW = 45.0  # seconds a failed embedder is left alone by searches
STATE_FILE = ".embedder-outage.json"  # next to the index, like the sync lock
# a sync's n-th failure in a row leaves the embedder alone for FIRST_BACKOFF * 2**(n-1)
# seconds, at most MAX_BACKOFF: a cron tick every minute then costs no dead embedder's timeouts
FIRST_BACKOFF = 60.0
MAX_BACKOFF = 1800.0


@dataclass(frozen=True)
class Outage:
    """What failed, since when (the first failure in a row), and when a sync tries again
    (None: no sync failed yet, only searches)."""

    error: str
    since: float
    last: float
    searched: float | None  # when a search last failed (its window); a sync's failure leaves it
    failures: int  # syncs that failed in a row
    next_try: float | None
    unreachable: bool = True  # no answer at all (else a wrong one: a bad vector, an HTTP 4xx)

    def describe(self) -> str:
        """One line for `status`: `embedder unreachable since 10:02:11 (…), next try at 10:10:11`."""
        line = f"embedder {'unreachable' if self.unreachable else 'failing'} since {_clock(self.since)}: {self.error}"
        return line + (f"; next sync tries it at {_clock(self.next_try)}" if self.next_try is not None else "")

    def to_json(self) -> dict[str, object]:
        return {
            "error": self.error,
            "unreachable": self.unreachable,
            "since": _iso(self.since),
            "failures": self.failures,
            "next_try": None if self.next_try is None else _iso(self.next_try),
        }


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def backoff(failures: int) -> float:
    """Seconds a sync leaves the embedder alone after its `failures`-th failure in a row."""
    return min(FIRST_BACKOFF * 2.0 ** max(0, min(failures, 32) - 1), MAX_BACKOFF)


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
        self._memory: dict[str, Outage] = {}

    def recorded(self, embedding: EmbeddingConfig) -> Outage | None:
        """The outage remembered for this embedder (the latest of memory and file), or None."""
        key = _key(embedding)
        with self._lock:
            return self._latest(key, self._read())

    def _latest(self, key: str, state: dict[str, Outage]) -> Outage | None:
        """The later of this process's memory and the shared file's `state` (under the lock)."""
        known = [e for e in (self._memory.get(key), state.get(key)) if e is not None]
        return max(known, key=lambda e: e.last, default=None)

    def outage(self, embedding: EmbeddingConfig) -> str | None:
        """Why a search leaves the embedder alone now (its last error and when it is tried
        again), or None when it is worth trying."""
        entry = self.recorded(embedding)
        now = self.clock()
        if entry is None or entry.searched is None or not 0 <= now - entry.searched < self.window:
            return None
        retry_in = max(1, round(self.window - (now - entry.searched)))
        return f"{entry.error}; not retried for {retry_in} s"

    def sync_backoff(self, embedding: EmbeddingConfig) -> Outage | None:
        """The outage while a sync should leave the embedder alone (before its next try), else None."""
        entry = self.recorded(embedding)
        if entry is None or entry.next_try is None:
            return None
        now = self.clock()
        # a clock set back by more than the longest wait must not silence the embedder for good
        return entry if now < entry.next_try and entry.next_try - now <= MAX_BACKOFF else None

    def failed(
        self, embedding: EmbeddingConfig, message: str, *, by_sync: bool = False, unreachable: bool = True
    ) -> Outage:
        """Remember a failure; a sync's (`by_sync`) also sets when the next sync tries."""
        key = _key(embedding)
        now = self.clock()
        with self._lock:
            state = self._read()
            before = self._latest(key, state)
            since = before.since if before is not None else now
            failures = before.failures if before is not None else 0
            next_try = before.next_try if before is not None else None
            searched = before.searched if before is not None else None
            if by_sync:
                failures += 1
                next_try = now + backoff(failures)
            else:
                searched = now
            entry = Outage(message, since, now, searched, failures, next_try, unreachable)
            self._memory[key] = entry
            state[key] = entry
            self._write(state)
        return entry

    def succeeded(self, embedding: EmbeddingConfig) -> None:
        """Forget an outage (writes only when one was remembered)."""
        key = _key(embedding)
        with self._lock:
            self._memory.pop(key, None)
            state = self._read()
            if key in state:
                del state[key]
                self._write(state)

    def _read(self) -> dict[str, Outage]:
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
            if not isinstance(value, dict):
                continue
            at, error = value.get("at"), value.get("error")
            if not isinstance(at, (int, float)) or not isinstance(error, str):
                continue
            since, failures, next_try = value.get("since", at), value.get("failures", 0), value.get("next")
            searched = value.get("searched", at)
            state[key] = Outage(
                error,
                float(since) if isinstance(since, (int, float)) else float(at),
                float(at),
                float(searched) if isinstance(searched, (int, float)) else None,
                failures if isinstance(failures, int) and failures >= 0 else 0,
                float(next_try) if isinstance(next_try, (int, float)) else None,
                value.get("unreachable") is not False,
            )
        return state

    def _write(self, state: dict[str, Outage]) -> None:
        """Atomically (temp file + rename), so a concurrent reader sees the old or the new state."""
        if self.state_file is None:
            return
        body = json.dumps(
            {
                key: {
                    "at": e.last,
                    "searched": e.searched,
                    "error": e.error,
                    "since": e.since,
                    "failures": e.failures,
                    "next": e.next_try,
                    "unreachable": e.unreachable,
                }
                for key, e in state.items()
            }
        )
        import tempfile  # only when an outage is written: a no-op sync or a query imports less

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
