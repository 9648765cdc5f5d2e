"""The sparse probe's language markers and its engine patch, on hand-made codes."""

from __future__ import annotations

import numpy as np

from bench.xl_sparse import EngineExtra, all_markers, engine_with, language_markers
from search import engine


def code(*latents: int) -> tuple[np.ndarray, np.ndarray]:
    return np.array(latents, dtype=np.int32), np.ones(len(latents), dtype=np.float32)


def test_a_latent_on_most_chunks_of_one_language_only_is_its_marker() -> None:
    # latent 7 fires on every Czech chunk and no English one; 3 (a topic) on both; 9 on a
    # single Czech chunk (too rare to tell the language); the mixed chunks are not judged
    cs = [code(7, 3), code(7, 3), code(7), code(7, 9), code(7, 3), code(7)]
    en = [code(3), code(3, 5), code(5), code(3), code(5), code(3)]
    mixed = [code(5, 11), code(11)]
    languages = np.array(["cs"] * len(cs) + ["en"] * len(en) + ["unknown"] * len(mixed))
    markers = language_markers(cs + en + mixed, languages, rate=0.5, other=0.1)
    assert sorted(markers) == ["cs", "en"]
    assert markers["cs"].tolist() == [7]
    assert markers["en"].tolist() == [5]  # on half the English chunks; mixed text does not count against it
    assert all_markers(markers).tolist() == [5, 7]


def test_a_language_with_too_few_chunks_has_no_markers() -> None:
    codes = [code(1)] * 6 + [code(2)] * 2
    languages = np.array(["en"] * 6 + ["ru"] * 2)
    markers = language_markers(codes, languages, rate=0.5, other=0.1)
    assert sorted(markers) == ["en"]
    assert markers["en"].tolist() == [1]


def test_the_engine_patch_is_undone_on_leaving() -> None:
    before = (engine._fuse, engine.keyword_blind, engine.rrf, engine.excerpt, engine._VectorHalf._searched)
    with engine_with(EngineExtra(sparse=[3, 1]), store=None):  # type: ignore[arg-type]
        fused = engine.rrf({"bm25": [1, 2]}, k=60)
        assert [item.chunk_id for item in fused] == [1, 3, 2]  # the third list counts in the fusion
        assert fused[0].ranks == {"bm25": 1, "sparse": 2}
    after = (engine._fuse, engine.keyword_blind, engine.rrf, engine.excerpt, engine._VectorHalf._searched)
    assert after == before
