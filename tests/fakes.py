"""Deterministic offline embeddings for tests: texts that share words get close vectors."""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata

import numpy as np

from indexer.config import EmbeddingConfig
from indexer.embedders import Embedder
from indexer.errors import EmbedderUnavailable

SLOTS_PER_TOKEN = 3
_WORD = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    """Lowercased word tokens with diacritics folded ("Příliš" -> "prilis")."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    folded = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return _WORD.findall(folded)


def hash_vector(text: str, dims: int) -> np.ndarray:
    """Bag of words: each token adds +-1 to a few hashed dimensions; L2-normalised float32.

    blake2b keeps it stable across processes (unlike `hash()`). A text without word tokens
    hashes as a whole, so it still gets a non-zero vector as a real model would give.
    """
    vector = np.zeros(dims, dtype=np.float32)
    for token in tokens(text) or [text]:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=4 * SLOTS_PER_TOKEN).digest()
        for slot in range(SLOTS_PER_TOKEN):
            chunk = digest[4 * slot : 4 * slot + 4]
            index = int.from_bytes(chunk[:3], "little") % dims
            vector[index] += 1.0 if chunk[3] & 1 else -1.0
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:  # every slot cancelled out; pick one dimension so the vector stays usable
        vector[int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest(), "little") % dims] = 1.0
        return vector
    return vector / norm


class FakeEmbedder(Embedder):
    """An Embedder without a model or server. Prefixes are ignored, so a query matches a
    passage that uses the same words. `down = True` simulates an unreachable server."""

    def __init__(self, config: EmbeddingConfig | None = None, dims: int = 64) -> None:
        """`dims` applies only without a config; a given config's dims win."""
        if config is None:
            config = EmbeddingConfig(provider="ollama", model="fake:1", endpoint="http://fake.invalid", dims=dims)
        super().__init__(config)
        self.down = False
        self.calls = 0
        self.texts_embedded = 0
        self._lock = threading.Lock()

    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        if self.down:
            raise EmbedderUnavailable(
                f"embedding server {self.config.endpoint or 'fake'} unreachable: fake embedder is down"
            )
        with self._lock:
            self.calls += 1
            self.texts_embedded += len(texts)
        return np.array([hash_vector(t, self.dims) for t in texts], dtype=np.float32).reshape(len(texts), self.dims)
