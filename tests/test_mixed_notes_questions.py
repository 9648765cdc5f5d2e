"""The mixed-notes benchmark's question file is well formed, and every note it names exists in
the shared eval corpora (when they are on this machine)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = REPO / "bench" / "data" / "mixed_notes_questions.yaml"
CORPORA = {"simonw-til-en": "en", "notes-sysops-ru": "ru", "linux-spellbook-cs": "cs"}
KINDS = {"short", "question", "exact", "cross"}


def questions() -> list[dict[str, object]]:
    data = yaml.safe_load(QUESTIONS.read_text(encoding="utf-8"))
    return list(data["questions"])


def corpora_folder() -> Path | None:
    """`shared/eval/corpora` beside the repository or beside the worktree's parent."""
    for base in (REPO.parent, REPO.parent.parent):
        folder = base / "shared" / "eval" / "corpora"
        if all((folder / name).is_dir() for name in CORPORA):
            return folder
    return None


def test_every_question_has_its_fields_and_a_category() -> None:
    items = questions()
    ids = Counter(str(q["id"]) for q in items)
    assert not [qid for qid, n in ids.items() if n > 1]
    for q in items:
        assert set(q) == {"id", "text", "lang", "kind", "note_lang", "relevant"}, q
        assert q["lang"] in CORPORA.values() and q["note_lang"] in CORPORA.values(), q
        assert q["kind"] in KINDS, q
        assert (q["kind"] == "cross") == (q["lang"] != q["note_lang"]), q
        if q["kind"] == "short":
            assert 2 <= len(str(q["text"]).split()) <= 4, q
        relevant = q["relevant"]
        assert isinstance(relevant, dict) and set(relevant.values()) <= {1, 2}, q
        answers = [ref for ref, grade in relevant.items() if grade == 2]
        assert any(CORPORA.get(ref.split("/", 1)[0]) == q["note_lang"] for ref in answers), q
        assert all(ref.split("/", 1)[0] in CORPORA for ref in relevant), q


def test_each_language_asks_every_kind_and_czech_asks_about_both_other_languages() -> None:
    items = questions()
    assert len(items) >= 120
    per_category = Counter((q["lang"], q["kind"]) for q in items)
    for lang in CORPORA.values():
        for kind in KINDS:
            assert per_category[(lang, kind)] >= 8, (lang, kind)
    czech_cross = Counter(q["note_lang"] for q in items if q["lang"] == "cs" and q["kind"] == "cross")
    assert czech_cross["en"] >= 10 and czech_cross["ru"] >= 10


def test_every_relevant_note_exists_in_the_corpora() -> None:
    folder = corpora_folder()
    if folder is None:
        pytest.skip("the shared eval corpora are not on this machine")
    missing = [ref for q in questions() for ref in q["relevant"] if not (folder / ref).is_file()]
    assert not missing
