"""Connections to the index's server: one pool per process (idle connections per URL and mode,
and what searches learned of each index), the URL as people see it, and the driver's errors
worded as one `StoreError` line without the password."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast
from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from indexer.errors import StoreError
from indexer.redaction import PERCENT_ENCODED, describe_url, password_needs_encoding, redact
from indexer.store.errormap import wrap_public_methods
from indexer.store.postgres.tsvector import Tsvector, TsvectorDumper

CONNECT_TIMEOUT_S = 10
POOL_SIZE = 4  # idle connections kept per URL and mode: a server's concurrent readers reuse them

# A sync's write transactions commit without waiting for the WAL flush: a server or machine
# crash may lose the last ones (never part of one: each is lost whole, and the next sync writes
# those files or embeds those chunks again), as SQLite's WAL with synchronous=NORMAL may; a
# killed worker loses nothing it committed. Any synchronous commit (marking a source synced,
# building the vector index) flushes every earlier one.
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"


class OpenIndex(Protocol):
    """An index open on its server (a `PostgresStore`): what a schema step works on, its
    connection inside the step's transaction, and its URL for messages."""

    conn: psycopg.Connection[Any]
    url: str


def describe(url: str) -> str:
    """The URL without its password, for messages and `status` (see indexer.redaction)."""
    return describe_url(url)


def first_lines(exc: BaseException, url: str) -> str:
    """The driver's message on one line, without the password of `url` in any form (libpq quotes
    what it cannot parse, password included)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return redact("; ".join(lines), url) or type(exc).__name__


def connect_error(url: str, exc: psycopg.Error) -> StoreError:
    """One line for a connection that failed: the server, the login or the database."""
    where = describe(url)
    sqlstate = getattr(exc, "sqlstate", None)
    text = first_lines(exc, url)
    if password_needs_encoding(url):
        return StoreError(f"index {where}: the password in the URL must be {PERCENT_ENCODED}: {text}")
    if sqlstate == "3D000" or ("does not exist" in text and "database" in text):
        dbname = urlsplit(url).path.lstrip("/") or "?"
        return StoreError(
            f"index {where}: the PostgreSQL database {dbname!r} does not exist (create it: `createdb {dbname}`)"
        )
    if sqlstate in {"28P01", "28000"} or "authentication failed" in text or "password" in text:
        return StoreError(f"index {where}: PostgreSQL refused the login ({text})")
    if "connect" in text.lower() or "server" in text.lower():
        return StoreError(f"index {where}: cannot reach the PostgreSQL server ({text}); is it running?")
    return StoreError(f"index {where}: {text}")


# what a server, a network or permissions can do to a statement; anything else is a bug to see whole
STORAGE_ERRORS = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    pg_errors.InsufficientPrivilege,
    pg_errors.ReadOnlySqlTransaction,
)


def storage_error(url: str, exc: psycopg.Error) -> StoreError:
    where = describe(url)
    if isinstance(exc, pg_errors.DiskFull):
        return StoreError(f"index {where}: the server's disk is full ({first_lines(exc, url)})")
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return StoreError(f"index {where}: opened read-only, cannot write ({first_lines(exc, url)})")
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return StoreError(f"index {where}: this PostgreSQL user lacks a privilege ({first_lines(exc, url)})")
    if isinstance(exc, psycopg.InterfaceError) or getattr(exc, "sqlstate", None) is None:
        return StoreError(f"index {where}: lost the connection to the PostgreSQL server ({first_lines(exc, url)})")
    return StoreError(f"index {where}: {first_lines(exc, url)}")


StoreT = TypeVar("StoreT", bound=type)
T = TypeVar("T")
MethodT = TypeVar("MethodT", bound=Callable[..., Any])


def _map_storage_errors(method: MethodT) -> MethodT:
    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except STORAGE_ERRORS as exc:
            raise storage_error(self.url, exc) from None

    return run  # type: ignore[return-value]


def storage_errors_mapped(cls: StoreT) -> StoreT:
    return wrap_public_methods(cls, _map_storage_errors, skip={"transaction", "snapshot", "close", "open", "exists"})


# ---- the pool: the one state this backend keeps per process ---------------------------------

_pool_lock = threading.Lock()
_pool: dict[tuple[str, bool], list[psycopg.Connection[Any]]] = {}
_pool_pid = os.getpid()
# url -> what searches of that index learned in this process, by name (see `learned`)
_learned: dict[str, dict[str, Any]] = {}


def learned(url: str, name: str, empty: Callable[[], T]) -> T:
    """What this process keeps of the index at `url` under `name` (made by `empty` the first
    time): shared by every store of it, since a server opens one per call, and forgotten
    whenever a connection is made anew (a restarted server may have lost commits, whose
    transaction ids then come again)."""
    with _pool_lock:
        kept = _learned.setdefault(url, {})
        if name not in kept:
            kept[name] = empty()
        return cast(T, kept[name])


def learned_everywhere(name: str) -> list[Any]:
    """What every index's stores keep under `name`."""
    with _pool_lock:
        return [kept[name] for kept in _learned.values() if name in kept]


def _connect(url: str, readonly: bool) -> psycopg.Connection[Any]:
    with _pool_lock:  # maybe a restarted server, whose lost commits' transaction ids come again
        _learned.pop(url, None)
    extra: dict[str, Any] = {}
    if "connect_timeout" not in url:
        extra["connect_timeout"] = CONNECT_TIMEOUT_S
    try:
        conn = psycopg.connect(url, autocommit=True, application_name="notes-search", **extra)
    except psycopg.Error as exc:
        raise connect_error(url, exc) from None
    conn.adapters.register_dumper(Tsvector, TsvectorDumper)
    try:
        conn.execute(f"SET default_transaction_read_only = {'on' if readonly else 'off'}")
    except psycopg.Error as exc:
        conn.close()
        raise connect_error(url, exc) from None
    return conn


def _take(url: str, readonly: bool) -> psycopg.Connection[Any] | None:
    global _pool_pid
    with _pool_lock:
        if _pool_pid != os.getpid():  # a forked child must not share its parent's sockets
            _pool.clear()
            _pool_pid = os.getpid()
        idle = _pool.get((url, readonly))
        return idle.pop() if idle else None


def give_back(url: str, readonly: bool, conn: psycopg.Connection[Any]) -> None:
    if conn.closed or conn.info.transaction_status != TransactionStatus.IDLE:
        conn.close()
        return
    with _pool_lock:
        idle = _pool.setdefault((url, readonly), [])
        if _pool_pid == os.getpid() and len(idle) < POOL_SIZE:
            idle.append(conn)
            return
    conn.close()


def live_connection(url: str, readonly: bool) -> psycopg.Connection[Any]:
    """A pooled connection that still answers, or a new one (the server may have restarted)."""
    conn = _take(url, readonly)
    if conn is not None:
        try:
            conn.execute("SELECT 1")
            return conn
        except psycopg.Error:
            conn.close()
    return _connect(url, readonly)


def discard_pool() -> None:
    """Close every idle pooled connection (tests dropping a database, a process ending)."""
    with _pool_lock:
        conns = [conn for idle in _pool.values() for conn in idle]
        _pool.clear()
    for conn in conns:
        conn.close()
