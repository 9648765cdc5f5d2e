"""Windows: every line of a chunk reaches its vector, each window within the model's tokens."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

from indexer import config as config_module
from indexer.chunker import parse_markdown
from indexer.config import Config, EmbeddingConfig, identity_mismatch, load_config
from indexer.embedders import LocalEmbedder
from indexer.errors import ConfigError
from indexer.known_models import known_window
from indexer.store import SearchScope
from indexer.sync import run_sync
from indexer.windows import estimate_tokens, window_lines, windows, windows_and_lines
from tests.conftest import make_config, open_index
from tests.fakes import FakeEmbedder, hash_vector
from tests.pg import both_backends

CZECH = (
    "Zálohování databáze PostgreSQL se dělá příkazem pg_dump, který vypíše obsah databáze do souboru; "
    "obnova ze zálohy pak proběhne přes psql nebo pg_restore podle formátu výpisu."
)
RUSSIAN = (
    "Резервное копирование базы данных PostgreSQL выполняется командой pg_dump, которая записывает "
    "содержимое базы в файл; восстановление из копии делается через psql или pg_restore."
)


def words(text: str) -> int:
    """A test tokenizer: a token per word, two for the prefix and the model's own tokens."""
    return len(text.split()) + 2


def assert_windows_hold_the_chunk(pieces: list[str], breadcrumb: str, text: str, max_tokens: int) -> None:
    assert len(pieces) > 1
    for piece in pieces:
        assert piece.startswith(f"{breadcrumb}\n\n")
    bodies = [piece.removeprefix(f"{breadcrumb}\n\n") for piece in pieces]
    for line in text.split("\n"):
        assert any(line in body for body in bodies), line
    # consecutive windows share whole lines: a sentence cut at an edge is read whole in the next
    for before, after in itertools.pairwise(bodies):
        assert before.split("\n")[-1] in after.split("\n")


@pytest.mark.parametrize("sentence", [CZECH, RUSSIAN], ids=["czech", "russian"])
def test_prose_is_cut_into_windows_the_model_reads_whole(sentence: str) -> None:
    # a line a window repeats is at most a quarter of it: Russian, at a token per letter for an
    # English vocabulary, fits that as half a sentence a line
    text = "\n".join(f"{i}. {half}" for i in range(40) for half in sentence.split("; "))
    pieces = windows("Zálohy > PostgreSQL", text, estimate_tokens, 512)
    assert all(estimate_tokens(piece) <= 512 for piece in pieces)
    assert_windows_hold_the_chunk(pieces, "Zálohy > PostgreSQL", text, 512)


def test_a_code_only_chunk_larger_than_the_window_gets_several_windows() -> None:
    code = (
        "```bash\n" + "\n".join(f"rsync -a --delete /srv/data{i}/ backup:/srv/data{i}/" for i in range(300)) + "\n```"
    )
    pieces = windows("Backup", code, words, 100)
    assert all(words(piece) <= 100 for piece in pieces)
    assert_windows_hold_the_chunk(pieces, "Backup", code, 100)


def test_a_line_longer_than_the_window_is_cut_between_words_and_kept_whole() -> None:
    line = " ".join(f"word{i}" for i in range(1000))
    pieces = windows("Long", line, words, 64)
    assert all(words(piece) <= 64 for piece in pieces)
    assert "".join(piece.removeprefix("Long\n\n") for piece in pieces) == line
    blob = "A" * 5000  # no space to cut at: cut anywhere, nothing lost
    cut = windows("Blob", blob, estimate_tokens, 128)
    assert all(estimate_tokens(piece) <= 128 for piece in cut)
    assert "".join(piece.removeprefix("Blob\n\n") for piece in cut) == blob


def test_a_chunk_just_over_the_window_is_cut_into_even_windows_not_a_full_one_and_a_scrap() -> None:
    lines = [f"step {i}: copy volume{i} to the tape library" for i in range(26)]  # 8 words each
    text = "\n".join(lines)
    pieces = windows("Backup", text, words, 200)
    sizes = [words(piece) for piece in pieces]
    assert len(pieces) == 2 and max(sizes) <= 200
    assert min(sizes) >= 0.75 * max(sizes), sizes  # greedy packing would leave a few lines alone
    assert_windows_hold_the_chunk(pieces, "Backup", text, 200)


def test_each_window_points_at_the_line_where_its_own_text_begins() -> None:
    lines = [f"Step {i}: the volume data{i} is copied to the tape library." for i in range(40)]
    text = "\n".join(lines)
    pieces = windows("Tape", text, words, 64)
    starts = window_lines("Tape", text, words, 64)
    assert len(starts) == len(pieces) > 2 and starts[0] == 0
    for i in range(1, len(pieces)):
        # right after the last line of the window before: the lines it repeats are not its own
        assert lines[starts[i]] in pieces[i] and lines[starts[i]] not in pieces[i - 1]
        assert lines[starts[i] - 1] in pieces[i - 1]
    assert window_lines("Tape", "short text", words, 64) == [0]
    long_line = " ".join(f"word{i}" for i in range(1000))  # pieces of one line all begin on it
    assert set(window_lines("Long", f"first\n{long_line}", words, 64)) == {0, 1}


def test_no_window_is_only_lines_of_the_one_before() -> None:
    # the last line (42 words) is repeated as a paragraph, and the 79-word line after it does
    # not fit beside it: a window of it alone would add nothing and point at a line it lacks
    lines = [" ".join(f"w{n}x{i}" for i in range(size)) for n, size in enumerate([11, 42, 79, 15])]
    text = "\n".join(lines)

    def tokens(piece: str) -> int:
        return len(piece.split()) + piece.count("\n") + 2

    pieces, starts = windows_and_lines("T", text, tokens, 105)
    assert len(pieces) > 1 and all(tokens(piece) <= 105 for piece in pieces)
    for i in range(1, len(pieces)):
        assert lines[starts[i]] in pieces[i] and lines[starts[i]] not in pieces[i - 1]
    assert all(any(line in piece for piece in pieces) for line in lines)  # (no room to repeat one here)


def test_a_chunk_the_model_reads_whole_is_one_window_and_a_huge_breadcrumb_gives_way() -> None:
    assert windows("Title > Section", "short text", words, 512) == ["Title > Section\n\nshort text"]
    crumb = " > ".join(f"heading{i}" for i in range(40))
    pieces = windows(crumb, "\n".join(f"line {i} of text" for i in range(60)), words, 60)
    assert len(pieces) > 1 and not any(crumb in piece for piece in pieces)
    assert all(words(piece) <= 60 for piece in pieces)


def test_an_oversized_chunk_gets_a_vector_per_window_and_a_short_one_its_own() -> None:
    embedder = FakeEmbedder(
        EmbeddingConfig(provider="ollama", model="fake:1", endpoint="http://x", dims=64, max_tokens=40)
    )
    long_text = "Notes > Backup\n\n" + "\n".join(f"step {i}: copy volume{i} to the tape library" for i in range(30))
    pieces = windows("Notes > Backup", long_text.split("\n\n", 1)[1], embedder.token_count, 40)
    assert len(pieces) > 2
    vectors = embedder.embed_chunks([long_text, "Notes\n\nshort"])
    assert vectors.owners.tolist() == [0] * len(pieces) + [1]
    expected = [hash_vector(piece, 64) for piece in pieces] + [hash_vector("Notes\n\nshort", 64)]
    assert np.allclose(vectors.matrix, expected, atol=1e-6)
    assert embedder.texts_embedded == len(pieces) + 1
    # a text shared by two chunks gives each its windows, under each one's id
    ids, rows = vectors.rows_of([1, 0, 1], [7, 8, 9])
    assert ids == [7] + [8] * len(pieces) + [9]
    assert np.allclose(rows, [expected[-1], *expected[:-1], expected[-1]], atol=1e-6)


def test_the_window_defaults_to_the_models_and_ollama_reads_its_context_at_most(tmp_path: Path) -> None:
    assert EmbeddingConfig().window == 384  # the local engine reads 512: its windows are shorter on purpose
    assert known_window("openai", "text-embedding-3-small") == 8191
    assert known_window("ollama", "nomic-embed-text:v1.5") == 2048
    assert known_window("openai", "nomic-embed-text-v1.5") == 8192
    assert known_window("ollama", "bge-m3:567m") == 2048
    assert known_window("openai", "intfloat/multilingual-e5-large") == 512
    assert known_window("ollama", "someones-embedder:1b") == 512
    config = tmp_path / "c.yaml"
    config.write_text(
        "embedding:\n  provider: ollama\n  model: bge-m3:567m\n  endpoint: http://127.0.0.1:9\n"
        "  dims: 1024\n  max_tokens: 8192\nsources: {}\n",
        encoding="utf-8",
    )
    assert load_config(config).embedding.window == 8192


def test_the_window_is_part_of_the_index_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    server = EmbeddingConfig(provider="ollama", model="nomic-embed-text:v1.5", endpoint="http://x", dims=768)
    meta = server.identity()
    assert identity_mismatch(server, meta) == []
    assert identity_mismatch(dataclasses.replace(server, max_tokens=8192), meta)
    monkeypatch.setattr(config_module, "WINDOWS_VERSION", "next")
    assert identity_mismatch(server, meta)  # another way of cutting windows: rebuilt
    # an index from before windows holds a vector per chunk, not per window: rebuilt, the
    # local engine's as well
    older = {key: value for key, value in meta.items() if key != "embedding_window"}
    assert identity_mismatch(server, older)
    local = EmbeddingConfig().identity()
    assert local["embedding_window"] == "384 tokens, windows next"
    assert identity_mismatch(EmbeddingConfig(), {k: v for k, v in local.items() if k != "embedding_window"})
    pooled = {**local, "embedding_window": "512 tokens, pooled by the engine"}  # the local engine's before
    assert identity_mismatch(EmbeddingConfig(), pooled)


def test_an_index_from_before_windows_is_embedded_again_and_says_why(
    tmp_path: Path, notes: Path, embedder: FakeEmbedder
) -> None:
    config = load_config(make_config(tmp_path, notes))
    config = dataclasses.replace(config, embedding=EmbeddingConfig())
    run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding))
    store = open_index(config)
    try:
        store.delete_meta(["embedding_window"])
    finally:
        store.close()
    report = run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding))
    assert report.rebuilt is not None and "embedding_window" in report.rebuilt
    store = open_index(config)
    try:
        assert report.embedded == store.counts()["chunks"] > 0
        assert store.meta()["embedding_window"] == config.embedding.identity()["embedding_window"]
    finally:
        store.close()


def test_the_local_engine_takes_no_window_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("embedding:\n  max_tokens: 256\nsources: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"max_tokens: the local engine's window is fixed \(384 tokens; its model"):
        load_config(config)
    config.write_text(
        "embedding:\n  endpoint: http://127.0.0.1:9\n  model: m:1\n  dims: 8\n  max_tokens: 4\nsources: {}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="max_tokens: expected an integer from 16"):
        load_config(config)


@pytest.mark.model
def test_the_local_engines_exact_count_keeps_real_czech_notes_within_its_window() -> None:
    local = LocalEmbedder(EmbeddingConfig())
    text = "\n\n".join(f"{CZECH} `pg_dump -Fc db{i} > db{i}.dump`" for i in range(12))
    chunk = parse_markdown(f"# Zálohy\n\n{text}\n", "zalohy.md").chunks[0]
    assert local.token_count(chunk.embed_text) > 512
    pieces = windows(chunk.breadcrumb, chunk.text, local.token_count, 512)
    assert len(pieces) > 1
    assert all(local.token_count(piece) <= 512 for piece in pieces)
    assert_windows_hold_the_chunk(pieces, chunk.breadcrumb, chunk.text, 512)


def windowed_config(tmp_path: Path, notes: Path, db_url: str | None, max_tokens: int) -> Config:
    """The test embedder with a declared window, storing its vectors as it gives them."""
    path = make_config(tmp_path, notes, db=db_url)
    text = path.read_text(encoding="utf-8").replace(
        "  dims: 64\n", f"  dims: 64\n  max_tokens: {max_tokens}\n  language_neutral: false\n"
    )
    path.write_text(text, encoding="utf-8")
    return load_config(path)


class TruncatingEmbedder(FakeEmbedder):
    """An HTTP server's model: what lies beyond its window (estimated here) is cut off."""

    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        kept = []
        for text in texts:
            while estimate_tokens(text) > self.config.window:
                text = text[: len(text) * 9 // 10]
            kept.append(text)
        return super().embed_batch(kept, is_query=is_query)


@both_backends
def test_a_code_block_longer_than_the_window_reaches_its_vector_and_its_hit_keeps_its_span(
    tmp_path: Path, notes: Path, db_url: str | None
) -> None:
    commands = "\n".join(f"rsync -a /srv/share{i}/ /mnt/backup/share{i}/" for i in range(14))
    note = f"# Restore\n\nHow the shares come back.\n\n```bash\n{commands}\nzfs rollback tank/home@nightly\n```\n"
    (notes / "restore.md").write_text(note, encoding="utf-8")
    config = windowed_config(tmp_path, notes, db_url, 128)
    embedder = TruncatingEmbedder(config.embedding)
    run_sync(config, embedder_factory=lambda: embedder)
    store = open_index(config)
    try:
        [chunk] = [row for row in store.chunk_rows(range(1, 1000)).values() if row.path == "restore.md"]
        assert (chunk.start_line, chunk.end_line) == (1, note.count("\n"))  # the block's true span
        assert store.counts()["pending"] == 0
        pieces = windows(chunk.breadcrumb, chunk.text, embedder.token_count, 128)
        assert len(pieces) > 2 and "zfs rollback" in pieces[-1]
        # a vector per window, in order: the line the server would have cut off has its own
        stored = [v for i, v in zip(*store.all_vectors(), strict=True) if i == chunk.id]
        assert np.allclose(stored, [hash_vector(piece, 64) for piece in pieces], atol=1e-5)
        assert store.counts()["vectors"] == len(store.chunk_rows(range(1, 1000)))  # chunks, not windows
        assert "zfs rollback" not in pieces[0]  # what the server alone would read lacks the tail
        # the chunk is as near as its nearest window: the tail's finds it first, once, unscoped
        # and inside a folder scope
        for scope in (SearchScope(), SearchScope(path="restore.md")):
            hits = store.vec_search(stored[-1], 3, scope)
            assert hits[0].chunk_id == chunk.id and hits[0].score == pytest.approx(0.0, abs=1e-5)
            assert [hit.chunk_id for hit in hits].count(chunk.id) == 1
    finally:
        store.close()
    # another window is another vector space: the index is rebuilt, honestly said
    wider = windowed_config(tmp_path, notes, db_url, 256)
    report = run_sync(wider, embedder_factory=lambda: FakeEmbedder(wider.embedding))
    assert report.rebuilt is not None and "embedding_window" in report.rebuilt
