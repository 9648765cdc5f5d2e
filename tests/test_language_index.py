"""Chunk languages in the index: stored at sync, reused for unchanged text, backfilled for an
index written before chunks had a language, counted per source."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from indexer import language, sync
from indexer.config import Config, load_config
from indexer.store import LANGUAGE_BACKFILL_KEY, SearchScope, Store
from indexer.sync import SyncReport, run_sync
from tests.conftest import make_config, open_index, write
from tests.fakes import FakeEmbedder
from tests.test_language import CODE_BLOCK, CZECH, ENGLISH, RUSSIAN

NOTES = {
    "cz/zaloha.md": f"# Záloha\n\n{CZECH}\n\n{CODE_BLOCK}\n",
    "en/backup.md": f"# Backup\n\n{ENGLISH}\n",
    "ru/kopiya.md": f"# Резервная копия\n\n{RUSSIAN}\n",
    "code/only.md": f"{CODE_BLOCK}\n",
}
EXPECTED = {"cz/zaloha.md": "cs", "en/backup.md": "en", "ru/kopiya.md": "ru", "code/only.md": "unknown"}


@pytest.fixture
def config(tmp_path: Path, db_url: str | None) -> Config:
    root = tmp_path / "notes"
    write(root, NOTES)
    return load_config(make_config(tmp_path, root, db=db_url))


@pytest.fixture
def do_sync(config: Config) -> Callable[..., SyncReport]:
    embedder = FakeEmbedder(config.embedding)

    def run(**kwargs: object) -> SyncReport:
        return run_sync(config, embedder_factory=lambda: embedder, **kwargs)  # type: ignore[arg-type]

    return run


def languages_by_path(config: Config) -> dict[str, set[str]]:
    store = open_index(config, readonly=True)
    try:
        paths = {row.id: row.path for row in store.chunk_rows(store.chunk_languages()).values()}
        out: dict[str, set[str]] = {}
        for chunk_id, lang in store.chunk_languages().items():
            out.setdefault(paths[chunk_id], set()).add(lang)
        return out
    finally:
        store.close()


def count_detections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every chunk text detected from now on, alone or in a batch."""
    seen: list[str] = []
    real, real_batch = language.chunk_language, language.chunk_languages

    def counting(text: str) -> str:
        seen.append(text)
        return real(text)

    def counting_batch(texts: list[str]) -> list[str]:
        seen.extend(texts)
        return real_batch(texts)

    monkeypatch.setattr(language, "chunk_language", counting)
    monkeypatch.setattr(language, "chunk_languages", counting_batch)
    return seen


def test_sync_stores_every_chunks_language_and_counts_them(do_sync: Callable[..., SyncReport], config: Config) -> None:
    do_sync()
    assert languages_by_path(config) == {path: {lang} for path, lang in EXPECTED.items()}
    store = open_index(config, readonly=True)
    try:
        assert store.language_counts() == {"notes": {"cs": 1, "en": 1, "ru": 1, "unknown": 1}}
        assert store.language_counts(SearchScope(path="ru")) == {"notes": {"ru": 1}}
        ids = list(store.chunk_languages())
        assert store.chunk_languages(ids[:2]) == {i: store.chunk_languages()[i] for i in ids[:2]}
        assert store.chunk_languages([]) == {}
    finally:
        store.close()


def test_unchanged_text_is_not_detected_again(
    do_sync: Callable[..., SyncReport], config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = config.sources["notes"].root  # type: ignore[attr-defined]
    sections = [f"## Část {i}\n\n{CZECH} {CZECH}\n" for i in range(3)]
    write(root, {"cz/long.md": "# Dlouhá\n\n" + "\n".join(sections)})
    do_sync()
    seen = count_detections(monkeypatch)
    do_sync()
    assert seen == []  # a no-op sync detects nothing
    write(
        root, {"cz/long.md": "# Dlouhá\n\n" + "\n".join([*sections[:2], sections[2] + "\nA ještě jedna věta navíc.\n"])}
    )
    do_sync()
    assert len(seen) == 1 and "navíc" in seen[0]  # only the edited chunk
    assert languages_by_path(config)["cz/long.md"] == {"cs"}


def make_old_index(config: Config) -> None:
    """Turn the index into one written before chunks had a language (schema 3)."""
    conn = apsw.Connection(str(config.db))
    try:
        conn.execute("ALTER TABLE chunks DROP COLUMN language")
        conn.execute("DROP TABLE file_tags")  # and what later steps added
        conn.execute("DROP INDEX idx_files_updated")
        conn.execute("DROP INDEX idx_files_front_matter_problem")
        conn.execute("ALTER TABLE files DROP COLUMN front_matter_problem")
        conn.execute("DROP TABLE window_vectors")
        conn.execute("DROP TABLE window_lines")
        conn.execute("PRAGMA user_version = 3")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    finally:
        conn.close()


@pytest.mark.sqlite_only("it rewrites the SQLite file into an older schema")
def test_an_older_index_gets_its_languages_on_the_next_sync_and_resumes_after_a_crash(
    do_sync: Callable[..., SyncReport], config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    do_sync()
    fresh = languages_by_path(config)
    make_old_index(config)
    store = open_index(config)  # the migration: the column, every old chunk still to detect
    try:
        upto = max(store.chunk_languages())
        assert store.meta()[LANGUAGE_BACKFILL_KEY] == f"{upto}:0"
        assert set(store.chunk_languages().values()) == {"unknown"}
    finally:
        store.close()

    monkeypatch.setattr(sync, "LANGUAGE_BACKFILL_BATCH", 2)
    calls = 0
    real = language.chunk_languages

    def crash_in_second_batch(texts: list[str]) -> list[str]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt
        return real(texts)

    monkeypatch.setattr(language, "chunk_languages", crash_in_second_batch)
    with pytest.raises(KeyboardInterrupt):
        do_sync()
    store = open_index(config, readonly=True)
    try:
        first_batch_end = sorted(store.chunk_languages())[1]
        assert store.meta()[LANGUAGE_BACKFILL_KEY] == f"{upto}:{first_batch_end}"  # one batch kept
    finally:
        store.close()

    seen = count_detections(monkeypatch)
    do_sync()
    assert len(seen) == len(fresh) - 2  # the rest, not the batch already done
    assert languages_by_path(config) == fresh
    store = open_index(config, readonly=True)
    try:
        assert LANGUAGE_BACKFILL_KEY not in store.meta()
    finally:
        store.close()
    seen.clear()
    do_sync()
    assert seen == []


def test_a_new_index_needs_no_backfill(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "index.sqlite")
    try:
        assert store.language_backfill() is None
        assert store.language_counts() == {}
    finally:
        store.close()


def test_each_chunk_of_a_file_keeps_its_own_language(
    do_sync: Callable[..., SyncReport], config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = config.sources["notes"].root  # type: ignore[attr-defined]
    write(
        root,
        {
            # a Czech note with an English section, a code-only section and a mixed one
            "cz/navod.md": (
                f"# Návod\n\n## Postup\n\n{CZECH} {CZECH}\n\n{CZECH}\n\n## Upstream\n\n{ENGLISH} {ENGLISH}\n\n{ENGLISH}\n\n"
                f"## Skript\n\n{CODE_BLOCK}\n\n{CODE_BLOCK}\n\n{CODE_BLOCK}\n\n"
                f"## Poznámky\n\n{RUSSIAN} {ENGLISH}\n\n{RUSSIAN} {ENGLISH}\n"
            ),
        },
    )
    seen = count_detections(monkeypatch)
    do_sync()
    store = open_index(config, readonly=True)
    try:
        languages = store.chunk_languages()
        by_heading = {row.breadcrumb: languages[row.id] for row in store.chunk_rows(languages).values()}
    finally:
        store.close()
    assert {heading: lang for heading, lang in by_heading.items() if heading.startswith("Návod")} == {
        "Návod": "cs",
        "Návod > Upstream": "en",
        "Návod > Skript": "unknown",
        "Návod > Poznámky": "unknown",
    }
    assert len(seen) == len(languages)  # every chunk of the new files, in one pass
