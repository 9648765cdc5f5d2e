"""embed_health.guarded: the one outage rule that interactive embedding calls share."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.config import load_config
from indexer.embed_health import OUTAGE_WINDOW, embedder_health, guarded
from indexer.errors import EmbedderUnavailable
from tests.conftest import make_config


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
