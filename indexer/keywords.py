"""The keyword query a store answers (`IndexReader.fts_search`): phrases joined by OR, each the
query's words in a row, its last word maybe a prefix. `search.querybuild` builds it; each
backend renders it in its own dialect (FTS5 MATCH text in `indexer.store.fts5`, tsqueries in
`indexer.store.postgres.tsquery`), so no store reads another's query text back.

The words are as the query spelled them (NFC, split where the tokenizer splits), not folded:
each backend folds them as its own index folded the documents (FTS5's unicode61, or the same
tokenizer's folding on PostgreSQL)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Phrase:
    """Words that must stand next to each other in this order; with `prefix`, the last one
    matches any word it begins (`backu` matches `backups`)."""

    words: tuple[str, ...]
    prefix: bool = False

    def __post_init__(self) -> None:
        if not self.words or not all(self.words):
            raise ValueError(f"a phrase needs words, got {self.words!r}")


@dataclass(frozen=True)
class KeywordQuery:
    """The chunks holding any of `phrases` (bm25 ranks those holding more of them higher)."""

    phrases: tuple[Phrase, ...]

    def __post_init__(self) -> None:
        if not self.phrases:
            raise ValueError("a keyword query needs a phrase")
