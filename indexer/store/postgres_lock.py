"""The sync lock of an index on PostgreSQL: session advisory locks (the rule is in indexer.lock).

All keys are taken on one autocommit connection opened for the run: PostgreSQL drops a
session's advisory locks when its connection ends, so a worker killed on any host leaves no
lock behind (the server notices the dead socket). Keys are 64-bit numbers derived from a name
by blake2b, stable across hosts, Python versions and processes (Python's hash() is salted);
two names sharing a key would only make their holders take turns. Indexes that share one
database in schemas of their own (`options=-csearch_path=...`) get keys of their own: the
schema the connection resolves to is part of every key.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import select
import socket
import time
from typing import TYPE_CHECKING

from indexer.errors import StoreError

if TYPE_CHECKING:
    import psycopg

POLL_SECONDS = 0.05
APPLICATION = "notes-search sync"
# how long a run's end waits for the server to free its locks before it closes the connection
# anyway (a server that stopped answering frees them when the session's backend goes)
UNLOCK_WAIT_SECONDS = 2.0


def lock_key(kind: str, name: str = "", namespace: str = "") -> int:
    """The signed 64-bit advisory key of `kind` ('index', 'embedding', 'source') and `name`.
    `namespace` separates indexes that share one database (e.g. by schema)."""
    digest = hashlib.blake2b(f"notes-search\0{namespace}\0{kind}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def unlock_all(conn: psycopg.Connection[tuple[object, ...]], wait: float) -> None:
    """Free every advisory lock of `conn`'s session, waiting at most `wait` seconds for the
    server's answer. The server would let them go when the session's backend exits, which it
    does after the client closes its socket, not before `close()` returns: a run started right
    after (a full sync after `reindex PATH`) found its source still claimed and skipped it. A
    broken or silent connection is left to that: `release()` runs in `finally` blocks, where a
    dead server is likeliest, and must not wait for TCP to give up."""
    import psycopg

    pgconn = conn.pgconn
    deadline = time.monotonic() + wait
    with contextlib.suppress(psycopg.Error, OSError):
        pgconn.send_query(b"SELECT pg_advisory_unlock_all()")
        while pgconn.flush() and select.select([], [pgconn.socket], [], max(0.0, deadline - time.monotonic()))[1]:
            pass  # the query goes out in pieces on a non-blocking connection
        # the answer comes once the server ran it; it is not read: the connection closes next
        select.select([pgconn.socket], [], [], max(0.0, deadline - time.monotonic()))


def connect(dsn: str, application: str) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection, or a one-line StoreError naming the server."""
    import psycopg

    try:
        return psycopg.connect(dsn, autocommit=True, application_name=application, connect_timeout=10)
    except psycopg.Error as exc:
        from indexer.store.postgres import connect_error

        raise connect_error(dsn, exc) from None


class AdvisoryIndexLock:
    """A sync run's claims on an index in PostgreSQL (see indexer.lock for what each covers)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.namespace = ""
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._index_exclusive = False

    def _try(self, function: str, key: int, timeout: float) -> bool:
        if self._conn is None:
            raise StoreError("the sync lock is not held: acquire() first")
        deadline = time.monotonic() + timeout
        while True:
            row = self._conn.execute(f"SELECT {function}(%s)", (key,)).fetchone()
            if row is not None and row[0] is True:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_SECONDS)

    def acquire(self, timeout: float = 0.0) -> bool:
        """Share the index with other runs; waits only while one works on the whole index."""
        self._conn = connect(self.dsn, f"{APPLICATION} pid={os.getpid()} host={socket.gethostname()}"[:63])
        self.namespace = _schema(self._conn)
        if self._try("pg_try_advisory_lock_shared", lock_key("index", namespace=self.namespace), timeout):
            return True
        self.release()
        return False

    def release(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            self._index_exclusive = False
            try:
                unlock_all(conn, UNLOCK_WAIT_SECONDS)
            finally:
                conn.close()

    def claim_source(self, source_id: str, timeout: float = 0.0) -> bool:
        return self._try("pg_try_advisory_lock", lock_key("source", source_id, self.namespace), timeout)

    def claim_embedding(self, timeout: float = 0.0) -> bool:
        return self._try("pg_try_advisory_lock", lock_key("embedding", namespace=self.namespace), timeout)

    def claim_index(self, timeout: float = 0.0) -> bool:
        """The exclusive index key: granted while no other run shares the index (this run's own
        shared hold does not conflict with it)."""
        if self._index_exclusive:
            return True
        self._index_exclusive = self._try("pg_try_advisory_lock", lock_key("index", namespace=self.namespace), timeout)
        return self._index_exclusive

    def release_index(self) -> None:
        if self._index_exclusive and self._conn is not None:
            self._conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key("index", namespace=self.namespace),))
        self._index_exclusive = False

    def __enter__(self) -> AdvisoryIndexLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _schema(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    """The schema the index's tables resolve to on this connection (its search_path's first)."""
    row = conn.execute("SELECT current_schema()").fetchone()
    return str(row[0]) if row is not None and row[0] is not None else ""


def sync_holder(dsn: str) -> int | None:
    """The pid (on its own host) of a run holding the index now, 0 if it gave none, None when
    no run does. Reads pg_locks: it takes no lock, so it never disturbs a starting sync."""
    conn = connect(dsn, "notes-search status")
    try:
        key = lock_key("index", namespace=_schema(conn))
        # a bigint key is stored as two 32-bit halves: classid the high, objid the low
        row = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
            " AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.database = (SELECT oid FROM pg_database"
            " WHERE datname = current_database()) ORDER BY a.backend_start LIMIT 1",
            ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
        ).fetchone()
    finally:
        conn.close()
    if row is None:
        return None
    found = re.search(r"pid=(\d+)", str(row[0] or ""))
    return int(found.group(1)) if found else 0
