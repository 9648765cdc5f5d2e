"""The real model on a small mixed-language folder (tests/data/mixed-notes): the fusion keeps
a note that holds every word of a short query first, and a Czech question still finds the
English note that answers it. One index per module (~15 chunks, a few seconds)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from indexer.config import Config, load_config
from indexer.embedders import make_embedder
from indexer.store import SearchScope, Store
from indexer.sync import run_sync
from search.engine import SearchResponse, search

pytestmark = pytest.mark.model

NOTES = Path(__file__).resolve().parent / "data" / "mixed-notes"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Config:
    root = tmp_path_factory.mktemp("mixed")
    shutil.copytree(NOTES, root / "notes", ignore=shutil.ignore_patterns("README.md"))
    (root / "notes-search.yaml").write_text(
        "sources:\n  workspace:\n    notes:\n      root: notes\n      paths: ['**']\n", encoding="utf-8"
    )
    config = load_config(root / "notes-search.yaml")
    embedder = make_embedder(config.embedding)
    report = run_sync(config, embedder_factory=lambda: embedder)
    assert report.pending == 0 and report.embedded > 0
    return config


def ask(config: Config, question: str, k: int = 5) -> SearchResponse:
    embedder = make_embedder(config.embedding)
    store = Store.open(config.db, readonly=True)
    try:
        return search(store, config, question, k=k, scope=SearchScope(), embedder_factory=lambda: embedder)
    finally:
        store.close()


def test_the_note_holding_both_words_comes_first(indexed: Config) -> None:
    response = ask(indexed, "obnova zálohy")
    assert response.query_language == "cs"
    assert response.keyword_blind > 0  # the English and Russian notes are in play
    # `obnova` and `zálohy` sit in two sections of the note: the note still covers the query
    assert response.keyword_coverage == 1.0 and response.keyword_weight == 1.0
    assert response.results[0].path == "cs/restic-na-nas.md", [h.path for h in response.results]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("jak přidat nové zařízení do VPN tunelu", "en/wireguard.md"),
        ("které upozornění v monitoringu má smysl posílat", "en/grafana-alerts.md"),
    ],
)
def test_a_czech_question_finds_the_english_note(indexed: Config, question: str, expected: str) -> None:
    response = ask(indexed, question, k=3)
    assert response.query_language == "cs"
    top = response.results[0]
    assert top.path == expected, [h.path for h in response.results]
    assert top.matched == "meaning" and top.explain["keyword_blind"] is True
