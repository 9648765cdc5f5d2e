"""Shared fixtures: a notes folder on disk, a config pointing at it, a deterministic embedder."""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar, cast

import pytest
from click.testing import CliRunner, Result

from indexer.config import Config, load_config
from indexer.keywords import KeywordQuery, Phrase
from indexer.lock import open_index_lock
from indexer.store import Store, open_store
from indexer.sync import SyncReport, run_sync
from search import cli as cli_module
from tests.fakes import FakeEmbedder
from tests.pg import pg_server, pg_url  # noqa: F401 - fixtures

FAKE_EMBEDDING = """\
embedding:
  provider: ollama
  model: fake:1
  endpoint: http://127.0.0.1:9
  dims: 64
"""


T = TypeVar("T")


def wait_for(check: Callable[[], T], what: str, timeout: float = 5.0, interval: float = 0.01) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def keywords(*phrases: str) -> KeywordQuery:
    """A keyword query of `phrases`, each its words apart by spaces, a trailing `*` making the
    last word a prefix: `keywords("db 01 lan*", "server")`."""
    return KeywordQuery(tuple(Phrase(tuple(p.removesuffix("*").split()), p.endswith("*")) for p in phrases))


def assert_one_line_error(result: Result, *needles: str) -> str:
    """Exit 1, no traceback, exactly one line on stderr starting with 'Error:' and naming needles."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got: {result.stderr!r}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def cli_on(config_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """`notes-search --config CONFIG_PATH ARGS...` through the click CLI with the test embedder:
    the `run` fixture of the end-to-end CLI tests."""
    monkeypatch.setattr(cli_module, "make_embedder", lambda config: FakeEmbedder(config))
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(cli_module.cli, ["--config", str(config_path), *args], catch_exceptions=False)

    return invoke


def synced_cli(config_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """`cli_on`, after a `sync` that must succeed."""
    invoke = cli_on(config_path, monkeypatch)
    assert invoke("sync").exit_code == 0
    return invoke


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def write_tree(root: Path, files: dict[str, str | bytes]) -> None:
    """Write text (UTF-8) or raw bytes files below root, creating folders."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


NOTES = {
    "devops/zalohovani.md": """
        ---
        title: Zálohování serveru
        tags: [devops, backup]
        ---
        # Zálohování serveru

        Každou noc běží záloha databáze na `db-01.lan` přes restic.

        ## Obnova

        Obnova ze zálohy trvá asi 20 minut. RPO je 24 hodin, RTO 2 hodiny.
        """,
    "devops/postgres.md": """
        # PostgreSQL

        Server poslouchá na portu 5432. Chyba ERR_CONN_RESET znamená restart pooleru.
        """,
    "travel/kazan.md": """
        # Поездка в Казань

        Кремль открыт с 8 утра. Эчпочмак стоит попробовать на рынке.

        ## Дорога

        Поезд из Москвы идёт около 12 часов.
        """,
    "cooking/sourdough.md": """
        # Sourdough

        Feed the starter twice a day with equal weights of flour and water.
        """,
}


def open_index(config: Config, readonly: bool = False) -> Store:
    """The config's index, on whichever store it lives (the Store protocol on either)."""
    return cast(Store, open_store(config.index_location, readonly=readonly))


@contextmanager
def sync_lock_held(config: Config) -> Iterator[None]:
    """Hold the index the way a running sync that excludes every other does, on either store:
    the SQLite file lock, or on PostgreSQL the exclusive index key (where runs otherwise share
    the index, so the file lock alone would stop nothing)."""
    lock = open_index_lock(config)
    assert lock.acquire()
    try:
        assert lock.claim_index()
        yield
    finally:
        lock.release()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sqlite_only(reason): the test is about the SQLite store itself (its file, WAL, flock, vec0, its"
        " migrations); with NOTES_SEARCH_TEST_BACKEND=postgres it is skipped, saying why",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("NOTES_SEARCH_TEST_BACKEND") != "postgres":
        return
    for item in items:
        if (marker := item.get_closest_marker("sqlite_only")) is not None:
            item.add_marker(pytest.mark.skip(reason=f"SQLite only: {marker.args[0]}"))


@pytest.fixture(autouse=True)
def isolated_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own git config (insteadOf, hooksPath, credential helpers) must not leak in."""
    cfg = tmp_path_factory.mktemp("gitcfg") / "gitconfig"
    cfg.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.fixture(autouse=True)
def isolated_user_folders(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own ~/.config/notes-search/config.yaml must not be found (nor written by `init`)."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Tests never write into the real home's cache folder, module-scoped fixtures included
    (hence the session scope); one folder per session, so the language identifier's tables are
    written once, not in every test."""
    folder = tmp_path_factory.mktemp("xdg-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder))
        yield folder


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    write(root, NOTES)
    return root


def make_config(
    tmp_path: Path, notes: Path, extra_sources: str = "", paths: str = '["**"]', db: str | None = None
) -> Path:
    """A config indexing `notes`; `db` puts the index elsewhere (a PostgreSQL URL, say)."""
    config = tmp_path / "notes-search.yaml"
    db_line = f'db: "{db}"\n' if db else ""
    config.write_text(
        f"""\
root: {tmp_path}
{db_line}{FAKE_EMBEDDING}
sources:
  workspace:
    notes:
      root: {notes}
      paths: {paths}
{extra_sources}""",
        encoding="utf-8",
    )
    return config


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The store under test: a test parametrised with `tests.pg.both_backends` runs on both; every
    other one on SQLite, or on $NOTES_SEARCH_TEST_BACKEND (`postgres` runs the whole suite's
    config-based tests against PostgreSQL)."""
    return str(getattr(request, "param", os.environ.get("NOTES_SEARCH_TEST_BACKEND", "sqlite")))


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """The PostgreSQL URL of this test's database, or None on SQLite (the config's default file)."""
    return str(request.getfixturevalue("pg_url")) if backend == "postgres" else None


@pytest.fixture(scope="module")
def module_db_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """`db_url` for an index a module's tests share (built once, read by many): a schema of its
    own on PostgreSQL with $NOTES_SEARCH_TEST_BACKEND=postgres, else None (the SQLite file)."""
    if os.environ.get("NOTES_SEARCH_TEST_BACKEND", "sqlite") != "postgres":
        yield None
        return
    server = request.getfixturevalue("pg_server")
    url = server.create_index()
    try:
        yield url
    finally:
        server.drop_index(url)


@pytest.fixture
def config_path(tmp_path: Path, notes: Path, db_url: str | None) -> Path:
    return make_config(tmp_path, notes, db=db_url)


@pytest.fixture
def config(config_path: Path) -> Config:
    return load_config(config_path)


@pytest.fixture
def embedder(config: Config) -> FakeEmbedder:
    return FakeEmbedder(config.embedding)


@pytest.fixture
def do_sync(config: Config, embedder: FakeEmbedder) -> Callable[..., SyncReport]:
    def run(**kwargs: object) -> SyncReport:
        kwargs.setdefault("embedder_factory", lambda: embedder)
        return run_sync(config, **kwargs)  # type: ignore[arg-type]

    return run
