"""Degraded mode against real embedding servers on 127.0.0.1: a search never waits on embedding
retries, lexical searches never touch the embedder, a failure is remembered for a while and
forgotten when the server is back; `sync --json` under a held lock; `--path .` catches up."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from indexer.config import Config, load_config
from indexer.embed_health import OUTAGE_WINDOW, embedder_health
from indexer.embedders import make_embedder
from indexer.store import SearchScope
from indexer.sync import run_sync
from search import cli as cli_module
from search.mcp_server import NotesTools
from search.service import NotesService
from tests.conftest import open_index, sync_lock_held, write
from tests.embed_servers import OllamaServer, closed_port_url
from tests.test_crash_safety import subprocess_env

NEW_NOTE = {"travel/okoun.md": "# Okoun\n\nOkoun říční chytaný na Lipně u Frymburku.\n"}


@pytest.fixture
def server() -> Iterator[OllamaServer]:
    with OllamaServer({"fake-embed:latest": 64}) as running:
        yield running


def write_config(tmp_path: Path, notes: Path, endpoint: str, db_url: str | None = None) -> Path:
    """Ollama protocol, no sync retries (a closed port would otherwise cost seconds per sync)."""
    path = tmp_path / "notes-search.yaml"
    db_line = f'db: "{db_url}"\n' if db_url else ""
    path.write_text(
        f"""\
root: {tmp_path}
{db_line}embedding:
  provider: ollama
  model: fake-embed:latest
  endpoint: {endpoint}
  dims: 64
  retries: 0
sources:
  workspace:
    notes:
      root: {notes}
      paths: ["**"]
""",
        encoding="utf-8",
    )
    return path


def synced(tmp_path: Path, notes: Path, server: OllamaServer, db_url: str | None) -> Config:
    """Indexed with every vector, through the real HTTP embedder, on the selected store."""
    config = load_config(write_config(tmp_path, notes, server.url, db_url))
    embedder = make_embedder(config.embedding)
    report = run_sync(config, embedder_factory=lambda: embedder)
    assert report.embedded > 0 and report.pending == 0
    return config


def cli(config: Config | Path, *args: str) -> Result:
    path = config if isinstance(config, Path) else config.path
    return CliRunner().invoke(cli_module.cli, ["--config", str(path), *args], catch_exceptions=False)


def query_json(config: Config | Path, *args: str) -> dict[str, Any]:
    result = cli(config, "query", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def pending_in(config: Config, path: str) -> int:
    store = open_index(config, readonly=True)
    try:
        return store.count_pending(SearchScope(path=path))
    finally:
        store.close()


START = 1_000_000.0


class Clock:
    """The outage memory's clock, moved by the test instead of sleeping through the window."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def use_clock(config: Config, clock: Clock) -> None:
    embedder_health(config).clock = clock


def test_lexical_queries_never_touch_the_embedder(
    tmp_path: Path, notes: Path, server: OllamaServer, monkeypatch: pytest.MonkeyPatch, db_url: str | None
) -> None:
    """Not one request, not even a constructed embedder: CLI and MCP, scoped (with a catch-up of
    a new note, whose text is indexed and whose vectors are left to the next sync) and not."""
    config = synced(tmp_path, notes, server, db_url)
    before = len(server.embed_requests)
    built: list[object] = []
    real = cli_module.make_embedder
    monkeypatch.setattr(cli_module, "make_embedder", lambda cfg: built.append(cfg) or real(cfg))
    write(notes, NEW_NOTE)
    scoped = query_json(config, "okoun", "--mode", "lex", "--path", "travel")
    assert scoped["results"][0]["path"] == "travel/okoun.md" and scoped["degraded"] is False
    assert pending_in(config, "travel/okoun.md") > 0  # stored now, embedded by the next sync
    assert query_json(config, "okoun", "--mode", "lex", "--source", "notes")["results"]
    assert query_json(config, "okoun", "--mode", "lex")["results"]
    write(notes, {"devops/okoun.md": "# Okoun v devops\n\nOkoun na serveru.\n"})
    tools = NotesTools(NotesService.from_config_file(str(config.path), cli_module.make_embedder))
    assert tools.search("okoun", "notes:devops", 8, "lex")["results"][0]["path"] == "devops/okoun.md"
    assert tools.search("okoun", None, 8, "lex")["results"]
    assert built == [] and len(server.embed_requests) == before
    # the next sync embeds what the lexical catch-ups left pending
    assert cli(config, "sync").exit_code == 0
    assert pending_in(config, "travel") == 0 and pending_in(config, "devops") == 0


def test_hybrid_query_remembers_a_failure_for_the_window_then_retries(
    tmp_path: Path, notes: Path, server: OllamaServer, clock: Clock, db_url: str | None
) -> None:
    config = synced(tmp_path, notes, server, db_url)
    use_clock(config, clock)
    tools = NotesTools(NotesService.from_config_file(str(config.path)))
    assert tools.search("záloha", None, 3, "hybrid")["degraded"] is False
    base = len(server.embed_requests)
    server.fail_next = 1000  # the server answers 500 from now on
    first = tools.search("záloha", None, 3, "hybrid")
    assert first["degraded"] is True and "HTTP 500" in first["notice"] and first["results"]
    assert len(server.embed_requests) == base + 1  # one attempt, no retries
    for offset in (1.0, OUTAGE_WINDOW / 2, OUTAGE_WINDOW - 1):  # inside the window: left alone
        clock.now = START + offset
        again = tools.search("záloha", None, 3, "hybrid")
        assert again["degraded"] is True and "not retried for" in again["notice"] and again["results"]
        scoped = tools.search("záloha", "notes:devops", 3, "hybrid")
        assert scoped["degraded"] is True and scoped["results"]
        assert query_json(config, "záloha")["degraded"] is True  # the CLI in this process too
        assert len(server.embed_requests) == base + 1
    clock.now = START + OUTAGE_WINDOW + 1  # the window is over: tried once more, still down
    assert tools.search("záloha", None, 3, "hybrid")["degraded"] is True
    assert len(server.embed_requests) == base + 2
    server.fail_next = 0  # back: after the window, searches use it again, every time
    clock.now += OUTAGE_WINDOW + 1
    for _ in range(2):
        healed = tools.search("záloha", None, 3, "hybrid")
        assert healed["degraded"] is False and healed["notice"] is None
    assert len(server.embed_requests) == base + 4


def test_a_successful_sync_ends_a_remembered_outage(
    tmp_path: Path, notes: Path, server: OllamaServer, clock: Clock, db_url: str | None
) -> None:
    config = synced(tmp_path, notes, server, db_url)
    use_clock(config, clock)
    server.fail_next = 1
    assert query_json(config, "záloha")["degraded"] is True
    assert query_json(config, "záloha")["degraded"] is True  # remembered
    write(notes, NEW_NOTE)
    assert cli(config, "sync").exit_code == 0  # sync keeps its own attempts; it succeeds
    assert query_json(config, "záloha")["degraded"] is False


def test_hanging_server_costs_one_short_timeout(
    tmp_path: Path, notes: Path, server: OllamaServer, db_url: str | None
) -> None:
    """Accepts and never answers: one attempt with the short read timeout (not the configured
    60 s, not four attempts), then left alone."""
    config = synced(tmp_path, notes, server, db_url)
    base = len(server.embed_requests)
    server.delay = 3600
    first = query_json(config, "záloha")
    assert first["degraded"] is True and "no answer within 2 s" in first["notice"]
    assert query_json(config, "záloha")["degraded"] is True
    assert len(server.embed_requests) == base + 1


def test_scoped_catch_up_with_the_embedder_down_stores_the_text(
    tmp_path: Path, notes: Path, server: OllamaServer, clock: Clock, db_url: str | None
) -> None:
    """The catch-up indexes a new note at once (pending), tries the embedder once, and the
    search finds the note by keywords; later searches leave the embedder alone."""
    config = synced(tmp_path, notes, server, db_url)
    use_clock(config, clock)
    base = len(server.embed_requests)
    server.fail_next = 1000
    write(notes, NEW_NOTE)
    data = query_json(config, "okoun Lipno", "--path", "travel")
    assert data["results"][0]["path"] == "travel/okoun.md"
    assert data["degraded"] is True and "without vectors" in data["notice"]
    assert pending_in(config, "travel/okoun.md") > 0
    assert len(server.embed_requests) == base + 1  # the catch-up's one attempt; the query knew
    write(notes, {"travel/candat.md": "# Candát\n\nCandát z Lipna.\n"})
    tools = NotesTools(NotesService.from_config_file(str(config.path)))
    mcp = tools.search("candát", "notes:travel", 3, "hybrid")
    assert mcp["results"][0]["path"] == "travel/candat.md" and mcp["degraded"] is True
    assert len(server.embed_requests) == base + 1


def test_one_shot_cli_processes_share_the_outage(tmp_path: Path, notes: Path, db_url: str | None) -> None:
    """A closed port: the first process learns it once, the next one skips the embedder (and
    never loads the HTTP client) because the outage is kept next to the index."""
    config_path = write_config(tmp_path, notes, closed_port_url(), db_url)
    driver = "import sys; from search.cli import main; sys.argv[0] = 'notes-search'; main()"
    cmd = [sys.executable, "-c", driver, "--config", str(config_path)]
    sync = subprocess.run([*cmd, "sync"], env=subprocess_env(), capture_output=True, text=True, timeout=60)
    assert sync.returncode == 0 and "unreachable" in sync.stderr
    probe = (
        "import sys; sys.argv = ['notes-search', *sys.argv[1:]]\n"
        "from search.cli import main\n"
        "try:\n    main()\nfinally:\n    print('requests loaded' if 'requests' in sys.modules else 'requests not loaded', file=sys.stderr)\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", probe, "--config", str(config_path), "query", "5432", "--json"],
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        for _ in range(2)
    ]
    first, second = (json.loads(run.stdout) for run in runs)
    assert first["degraded"] and "connection refused" in first["notice"] and "requests loaded" in runs[0].stderr
    assert second["degraded"] and "not retried for" in second["notice"] and "requests not loaded" in runs[1].stderr
    assert second["results"][0]["path"] == "devops/postgres.md"


def test_sync_json_says_when_another_sync_holds_the_lock(
    tmp_path: Path, notes: Path, server: OllamaServer, db_url: str | None
) -> None:
    config = synced(tmp_path, notes, server, db_url)
    normal = json.loads(cli(config, "sync", "--json").stdout)
    with sync_lock_held(config):
        locked = cli(config, "sync", "--json")
        assert locked.exit_code == 0 and locked.stderr == ""
        data = json.loads(locked.stdout)
        assert data["locked"] is True and data["changed"] is False and data["sources"] == []
        assert set(data) == set(normal) and normal["locked"] is False
        for quiet in (["sync"], ["sync", "--quiet"]):  # cron: silence
            result = cli(config, *quiet)
            assert result.exit_code == 0 and result.output == ""


@pytest.mark.parametrize("whole", [".", ""])
def test_path_dot_and_empty_catch_up_like_a_source(
    tmp_path: Path, notes: Path, server: OllamaServer, whole: str, db_url: str | None
) -> None:
    config = synced(tmp_path, notes, server, db_url)
    write(notes, NEW_NOTE)
    data = query_json(config, "okoun Lipno", "--path", whole)
    assert data["results"] and data["results"][0]["path"] == "travel/okoun.md"
    assert data["degraded"] is False  # caught up and embedded inside the query
