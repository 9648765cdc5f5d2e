"""Embedding clients behind one interface: batching, L2 normalisation and checks live here."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from indexer.config import EmbeddingConfig
from indexer.errors import EmbedderError


class Embedder(ABC):
    """Subclasses implement `embed_batch`; callers use `embed_passages` and `embed_query`."""

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config
        self.dims = config.dims

    @abstractmethod
    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        """Embed one batch (len <= config.batch); return an (n, dims) array."""

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        step = self.config.batch
        for start in range(0, len(texts), step):
            batch = list(texts[start : start + step])
            out[start : start + len(batch)] = self._checked(self.embed_batch(batch, is_query=False), len(batch))
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self._checked(self.embed_batch([text], is_query=True), 1)[0]

    def _checked(self, vectors: np.ndarray, expected: int) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != expected:
            raise EmbedderError(
                f"embedder {self.config.model!r} returned {vectors.shape[0] if vectors.ndim else 0} vectors for {expected} inputs"
            )
        if vectors.shape[1] != self.dims:
            raise EmbedderError(
                f"embedder {self.config.model!r} returned {vectors.shape[1]}-d vectors, config says dims: {self.dims}"
            )
        if not np.all(np.isfinite(vectors)):
            raise EmbedderError(f"embedder {self.config.model!r} returned non-finite values")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return vectors / norms
