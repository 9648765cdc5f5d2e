"""The benchmarks' vector cache gives a chunk the vector its wrapped embedder would give it: a
figure measured through the cache is the product's figure, not another embedder's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.beir import CachingEmbedder
from indexer.config import EmbeddingConfig
from indexer.embedders import LocalEmbedder
from indexer.windows import windows
from tests.fakes import FakeEmbedder

LONG_CS = "Záloha databáze se obnovuje příkazem pg_restore do prázdné databáze na novém serveru. " * 25


def test_a_long_chunk_through_the_cache_is_read_whole_by_the_local_engine(tmp_path: Path) -> None:
    local = LocalEmbedder(EmbeddingConfig())
    text = "Zálohy\n\n" + LONG_CS
    assert local.token_count(text) > local.config.window  # long enough that windows would differ
    cached = CachingEmbedder(local, tmp_path / "vectors.sqlite")
    try:
        got = cached.embed_chunks([text])
        # one text went to the model, the chunk whole (not its windows), and it is what came back
        assert cached.misses == 1
        [(stored,)] = cached.db.execute("SELECT vec FROM vectors WHERE key = ?", (cached._key(text, False),))
        np.testing.assert_allclose(got[0], np.frombuffer(stored, dtype=np.float32), atol=1e-6)
        np.testing.assert_array_equal(cached.embed_chunks([text]), got)
        assert cached.hits == 1
    finally:
        cached.close()


def test_a_servers_long_chunk_through_the_cache_gets_the_servers_windows(tmp_path: Path) -> None:
    server = FakeEmbedder(EmbeddingConfig(provider="ollama", model="fake:1", dims=64, max_tokens=64))
    text = "Restore\n\n" + "\n".join(f"rsync -a /srv/share{i}/ /mnt/backup/share{i}/" for i in range(20))
    pieces = windows("Restore", text.partition("\n\n")[2], server.token_count, server.config.window)
    assert len(pieces) > 1
    cached = CachingEmbedder(server, tmp_path / "vectors.sqlite")
    try:
        np.testing.assert_allclose(cached.embed_chunks([text]), server.embed_chunks([text]), atol=1e-6)
        assert cached.misses == len(pieces)
    finally:
        cached.close()
