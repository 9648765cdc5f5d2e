"""The benchmarks' vector cache gives a chunk the vector its wrapped embedder would give it: a
figure measured through the cache is the product's figure, not another embedder's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.beir import CachingEmbedder
from indexer.config import EmbeddingConfig
from indexer.embedders import Embedder, LocalEmbedder
from indexer.windows import windows
from tests.fakes import FakeEmbedder

LONG_CS = "Záloha databáze se obnovuje příkazem pg_restore do prázdné databáze na novém serveru. " * 25


def test_a_long_chunk_through_the_cache_gets_the_local_engines_own_windows(tmp_path: Path) -> None:
    local = LocalEmbedder(EmbeddingConfig())
    text = "Zálohy\n\n" + LONG_CS
    pieces = windows("Zálohy", LONG_CS, local.token_count, local.config.window)
    assert len(pieces) > 1
    # cut by the engine's exact count, as an index cuts them, not by the servers' estimate
    assert pieces != windows("Zálohy", LONG_CS, lambda piece: Embedder.token_count(local, piece), 512)
    cached = CachingEmbedder(local, tmp_path / "vectors.sqlite")
    try:
        got = cached.embed_chunks([text])
        assert cached.misses == len(pieces) and got.owners.tolist() == [0] * len(pieces)
        for piece, row in zip(pieces, got.matrix, strict=True):
            [(stored,)] = cached.db.execute("SELECT vec FROM vectors WHERE key = ?", (cached._key(piece, False),))
            np.testing.assert_allclose(row, np.frombuffer(stored, dtype=np.float32), atol=1e-6)
        np.testing.assert_array_equal(cached.embed_chunks([text]).matrix, got.matrix)
        assert cached.hits == len(pieces)
    finally:
        cached.close()


def test_a_servers_long_chunk_through_the_cache_gets_the_servers_windows(tmp_path: Path) -> None:
    server = FakeEmbedder(EmbeddingConfig(provider="ollama", model="fake:1", dims=64, max_tokens=64))
    text = "Restore\n\n" + "\n".join(f"rsync -a /srv/share{i}/ /mnt/backup/share{i}/" for i in range(20))
    pieces = windows("Restore", text.partition("\n\n")[2], server.token_count, server.config.window)
    assert len(pieces) > 1
    cached = CachingEmbedder(server, tmp_path / "vectors.sqlite")
    try:
        np.testing.assert_allclose(cached.embed_chunks([text]).matrix, server.embed_chunks([text]).matrix, atol=1e-6)
        assert cached.misses == len(pieces)
    finally:
        cached.close()
