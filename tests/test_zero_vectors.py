"""A zero vector is an embedder error, never a stored direction; an index that holds some from
an older version repairs itself on the next sync (on both stores)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from indexer.config import Config, load_config
from indexer.embedders import make_embedder
from indexer.sync import SyncReport, run_sync
from indexer.vectors import ZERO_VECTORS_CHECKED_KEY
from search import cli as cli_module
from tests.conftest import open_index
from tests.embed_servers import OllamaServer
from tests.fakes import FakeEmbedder
from tests.pg import both_backends
from tests.test_embed_health import http_config_path

Sync = Callable[..., SyncReport]


def stored_norms(config: Config) -> dict[int, float]:
    store = open_index(config)
    try:
        page = store.vectors_by_language(0, 1_000_000)
        return {i: float(n) for i, n in zip(page.ids, np.linalg.norm(page.matrix, axis=1), strict=True)}
    finally:
        store.close()


@both_backends
def test_zero_vectors_an_older_version_stored_are_embedded_again(
    do_sync: Sync, config: Config, embedder: FakeEmbedder
) -> None:
    do_sync()
    norms = stored_norms(config)
    broken = sorted(norms)[:2]
    store = open_index(config)
    try:  # what an older version left: zero vectors, counted as embedded, and no check done yet
        with store.transaction():
            store.rewrite_vectors(broken, np.zeros((len(broken), config.embedding.dims), np.float32))
        store.delete_meta([ZERO_VECTORS_CHECKED_KEY])
        assert store.count_pending_all() == 0
    finally:
        store.close()
    before = embedder.texts_embedded
    report = do_sync()
    assert report.repaired_vectors == len(broken) and report.pending == 0
    assert embedder.texts_embedded > before  # embedded again, not copied from elsewhere
    assert all(abs(n - 1.0) < 1e-3 for n in stored_norms(config).values())
    # the check runs once: a later sync reads no vector page for it
    again = do_sync()
    assert again.repaired_vectors == 0


@pytest.fixture
def ollama() -> Iterator[OllamaServer]:
    with OllamaServer({"fake-embed:latest": 64}) as server:
        yield server


@pytest.mark.sqlite_only("the embedder's reply is the subject; the store is the default one")
def test_an_embedder_answering_zero_vectors_stores_nothing_and_leaves_the_chunks_pending(
    tmp_path: Path, notes: Path, ollama: OllamaServer
) -> None:
    config = load_config(http_config_path(tmp_path, notes, ollama.url))
    ollama.zero_for = "starter"  # the sourdough note's chunk
    embedder = make_embedder(config.embedding)
    report = run_sync(config, embedder_factory=lambda: embedder)
    assert report.pending > 0 and report.embedded == 0
    assert report.embed_notice is not None and "zero (or near-zero) vector" in report.embed_notice
    assert stored_norms(config) == {}  # nothing of the batch was stored
    status = CliRunner().invoke(
        cli_module.cli, ["--config", str(tmp_path / "notes-search.yaml"), "status", "--offline"]
    )
    assert "embedder failing since" in status.stdout and "zero (or near-zero) vector" in status.stdout
    ollama.zero_for = None  # the embedder mended: `sync --retry-embedder` embeds everything now
    report = run_sync(config, embedder_factory=lambda: embedder, retry_embedder=True)
    assert report.pending == 0 and all(abs(n - 1.0) < 1e-3 for n in stored_norms(config).values())
