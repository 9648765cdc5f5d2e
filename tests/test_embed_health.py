"""embed_health.guarded: the one outage rule that interactive embedding calls share."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from indexer.config import load_config
from indexer.embed_health import FIRST_BACKOFF, OUTAGE_WINDOW, backoff, embedder_health, guarded
from indexer.embedders import make_embedder
from indexer.errors import EmbedderUnavailable
from indexer.sync import run_sync
from search import cli as cli_module
from tests.conftest import make_config
from tests.embed_servers import OllamaServer, closed_port_url
from tests.test_mcp import NOTES_SEARCH, server_env


def test_guarded_remembers_an_outage_skips_calls_during_it_and_forgets_it_on_success(
    tmp_path: Path,
    notes: Path,
    db_url: str | None,
) -> None:
    config = load_config(make_config(tmp_path, notes, db=db_url))
    now = [1_000_000.0]
    health = embedder_health(config)
    health.clock = lambda: now[0]
    calls: list[str] = []

    def down() -> int:
        calls.append("down")
        raise EmbedderUnavailable("connection refused")

    def up() -> int:
        calls.append("up")
        return 7

    with pytest.raises(EmbedderUnavailable, match="connection refused"):
        guarded(config, down)
    with pytest.raises(EmbedderUnavailable, match="not retried for"):
        guarded(config, up)  # within the window: the call is not even made
    assert calls == ["down"]
    now[0] += OUTAGE_WINDOW + 1
    assert guarded(config, up) == 7
    assert health.outage(config.embedding) is None
    assert guarded(config, up) == 7
    assert calls == ["down", "up", "up"]


# ---- a sync's outage back-off ---------------------------------------------------------------


@pytest.fixture
def failing_ollama() -> Iterator[OllamaServer]:
    """An embedder that answers every embed request with HTTP 500 (counted) until told not to."""
    with OllamaServer({"fake-embed:latest": 64}) as server:
        server.fail_next = 10**6
        yield server


def http_config_path(tmp_path: Path, notes: Path, endpoint: str, **embedding: object) -> Path:
    path = make_config(tmp_path, notes)
    text = path.read_text(encoding="utf-8").replace("model: fake:1", "model: fake-embed:latest")
    extra = "".join(f"  {key}: {value}\n" for key, value in embedding.items())
    text = text.replace("  endpoint: http://127.0.0.1:9\n", f"  endpoint: {endpoint}\n{extra}")
    path.write_text(text, encoding="utf-8")
    return path


def cli(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli_module.cli, ["--config", str(config), *args])


def test_cron_ticks_during_an_outage_back_off_and_status_says_until_when(
    tmp_path: Path, notes: Path, failing_ollama: OllamaServer
) -> None:
    path = http_config_path(tmp_path, notes, failing_ollama.url, retries=0)
    config = load_config(path)
    now = [2_000_000_000.0]
    embedder_health(config).clock = lambda: now[0]

    first = cli(path, "sync")
    assert first.exit_code == 0 and "HTTP 500" in first.stderr
    assert len(failing_ollama.embed_requests) == 1
    for _ in range(3):  # the next cron ticks within the back-off: the dead embedder is not called
        now[0] += 15
        tick = cli(path, "sync")
        assert (
            tick.exit_code == 0
            and "embedder unreachable since" in tick.stderr
            and "next sync tries it at" in tick.stderr
        )
    assert len(failing_ollama.embed_requests) == 1

    shown = cli(path, "status", "--offline")
    assert "embedder unreachable since" in shown.stdout and "next sync tries it at" in shown.stdout
    assert "--retry-embedder" in shown.stdout
    outage = json.loads(cli(path, "status", "--offline", "--json").stdout)["embedding"]["outage"]
    assert outage["failures"] == 1 and outage["unreachable"] and "HTTP 500" in outage["error"]
    assert outage["next_try"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(2_000_000_000.0 + FIRST_BACKOFF))

    now[0] = 2_000_000_000.0 + FIRST_BACKOFF + 1  # due: tried once more, then twice as long a wait
    assert cli(path, "sync").exit_code == 0 and len(failing_ollama.embed_requests) == 2
    outage = json.loads(cli(path, "status", "--offline", "--json").stdout)["embedding"]["outage"]
    assert outage["failures"] == 2
    assert outage["since"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(2_000_000_000.0))
    now[0] += FIRST_BACKOFF + 1  # within the second, longer wait
    assert cli(path, "sync").exit_code == 0 and len(failing_ollama.embed_requests) == 2

    assert cli(path, "sync", "--retry-embedder").exit_code == 0 and len(failing_ollama.embed_requests) == 3
    failing_ollama.fail_next = 0  # back; `sync --full` does not wait for the schedule either
    done = cli(path, "sync", "--full", "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["pending"] == 0
    assert json.loads(cli(path, "status", "--offline", "--json").stdout)["embedding"]["outage"] is None
    assert "unreachable" not in cli(path, "status", "--offline").stdout


def test_the_schedule_doubles_up_to_half_an_hour() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4, 5, 6, 7, 50)] == [60, 120, 240, 480, 960, 1800, 1800, 1800]


def test_a_dead_endpoint_is_remembered_between_processes(tmp_path: Path, notes: Path) -> None:
    """Two real `sync` processes against a closed port: the second one does not try it."""
    path = http_config_path(tmp_path, notes, closed_port_url(), retries=0)
    run = [str(NOTES_SEARCH), "--config", str(path), "sync"]
    first = subprocess.run(run, capture_output=True, text=True, timeout=120, env=server_env())
    assert first.returncode == 0 and "connection refused" in first.stderr.lower()
    second = subprocess.run(run, capture_output=True, text=True, timeout=120, env=server_env())
    assert second.returncode == 0 and "embedder unreachable since" in second.stderr
    assert "next sync tries it at" in second.stderr and "connection refused" in second.stderr.lower()


def test_a_hanging_embedder_holds_a_sync_no_longer_than_its_retry_budget(tmp_path: Path, notes: Path) -> None:
    """A server that accepts and never answers, 20 retries allowed: the budget stops them, the
    chunks are stored pending, and the lock is free for the next sync."""
    with OllamaServer({"fake-embed:latest": 64}) as hanging:
        hanging.delay = 60.0
        path = http_config_path(tmp_path, notes, hanging.url, retries=20, timeout=0.3, retry_budget_s=1)
        config = load_config(path)
        report = run_sync(config, embedder_factory=lambda: make_embedder(config.embedding))
        assert report.pending > 0 and report.embed_notice is not None
        assert "retry budget of 1 s spent" in report.embed_notice
        assert 1 <= len(hanging.embed_requests) < 5  # 21 were allowed
        again = run_sync(config, embedder_factory=None)  # the lock was released
        assert not again.locked
