"""Metrics against hand-computed cases, and `notes-search eval` end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from indexer.config import EmbeddingConfig
from indexer.errors import NotesSearchError
from search import cli as cli_module
from search.cli.evaluate import eval_command
from search.evaluate import ExpectedLocation as Target
from search.evaluate import (
    dcg,
    load_questions,
    mean_reciprocal_rank,
    ndcg_at_k,
    parse_target,
    recall_at_k,
    recall_at_rank,
    reciprocal_rank,
)
from tests.fakes import FakeEmbedder
from tests.pg import both_backends

# ---- metrics ---------------------------------------------------------------------------------


def test_dcg_discounts_by_log2_of_rank_plus_one() -> None:
    assert dcg([3, 2, 0, 1], 10) == pytest.approx(3 / 1 + 2 / math.log2(3) + 1 / math.log2(5))
    assert dcg([3, 2, 0, 1], 1) == 3.0


def test_ndcg_with_graded_relevance() -> None:
    qrels = {"a": 3, "b": 2, "c": 1}
    ranked = ["b", "x", "a", "c"]
    # DCG = 2/log2(2) + 0 + 3/log2(4) + 1/log2(5) = 3.9306766; IDCG = 3 + 2/log2(3) + 1/2 = 4.7618595
    assert ndcg_at_k(ranked, qrels, 10) == pytest.approx(0.825450, abs=1e-6)
    # cut at 2: DCG = 2, IDCG@2 = 3 + 2/log2(3)
    assert ndcg_at_k(ranked, qrels, 2) == pytest.approx(2 / (3 + 2 / math.log2(3)))
    assert ndcg_at_k(["a", "b", "c"], qrels, 10) == pytest.approx(1.0)


def test_ndcg_ideal_comes_from_the_judgements_not_the_run() -> None:
    # b is relevant but never retrieved: the ideal still counts it
    assert ndcg_at_k(["a"], {"a": 1, "b": 1}, 10) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    # relevance 0 is "judged not relevant": no gain, not in the ideal
    assert ndcg_at_k(["z", "a"], {"a": 1, "z": 0}, 10) == pytest.approx(1 / math.log2(3))
    assert ndcg_at_k(["a"], {"a": 0}, 10) == 0.0
    assert ndcg_at_k([], {"a": 1}, 10) == 0.0


def test_recall_at_100() -> None:
    ranked = [f"n{i}" for i in range(150)]
    ranked[49], ranked[119] = "a", "b"  # ranks 50 and 120
    qrels = {"a": 1, "b": 2, "c": 0}
    assert recall_at_k(ranked, qrels, 100) == 0.5
    assert recall_at_k(ranked, qrels, 150) == 1.0
    assert recall_at_k(ranked, qrels, 10) == 0.0
    assert recall_at_k(ranked, {"c": 0}, 100) == 0.0


def test_reciprocal_rank() -> None:
    assert reciprocal_rank(["x", "y", "a"], {"a": 1}) == pytest.approx(1 / 3)
    assert reciprocal_rank(["x", "y", "a"], {"a": 1}, k=2) == 0.0
    assert reciprocal_rank(["x", "y"], {"a": 1}) == 0.0


def test_recall_and_mrr_over_question_ranks() -> None:
    ranks = [1, 3, None, 7]
    assert recall_at_rank(ranks, 1) == 0.25
    assert recall_at_rank(ranks, 5) == 0.5
    assert recall_at_rank(ranks, 10) == 0.75
    assert mean_reciprocal_rank(ranks) == pytest.approx((1 + 1 / 3 + 0 + 1 / 7) / 4)
    assert recall_at_rank([], 10) == 0.0


# ---- targets and question files --------------------------------------------------------------


def test_parse_target_forms() -> None:
    sources = {"notes", "wiki"}
    assert parse_target("devops/a.md", sources) == Target("devops/a.md")
    assert parse_target("./devops/a.md", sources) == Target("devops/a.md")
    assert parse_target("devops/a.md:12", sources) == Target("devops/a.md", None, 12, 12)
    assert parse_target("notes:devops/a.md:3-9", sources) == Target("devops/a.md", "notes", 3, 9)
    assert parse_target("other:a.md", sources) == Target("other:a.md")  # not a source: part of the name
    assert str(parse_target("wiki:x/y.md:4-4", sources)) == "wiki:x/y.md:4"
    for bad in ("../a.md", "a/../../b.md", "a.md:9-3", "a.md:0", "notes:"):
        with pytest.raises(ValueError, match=r"empty or not 1-based|not a path relative to a source root"):
            parse_target(bad, sources)


def test_load_questions_yaml_and_jsonl(tmp_path: Path) -> None:
    yaml_file = tmp_path / "q.yaml"
    yaml_file.write_text(
        '- {question: "port 5432", path: "notes:devops/postgres.md:3", kind: exact}\n'
        '- {question: "bread", path: cooking/sourdough.md}\n',
        encoding="utf-8",
    )
    questions = load_questions(yaml_file, {"notes"})
    assert [q.kind for q in questions] == ["exact", None]
    assert questions[0].target == Target("devops/postgres.md", "notes", 3, 3)
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text('{"question": "bread", "path": "cooking/sourdough.md", "kind": "semantic"}\n\n', encoding="utf-8")
    assert load_questions(jsonl, {"notes"})[0].kind == "semantic"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("- {question: q, path: a.md, kinds: exact}\n", "question 1: unknown key 'kinds'"),
        ("- {question: q, path: a.md, kind: fuzzy}\n", "'kind' must be one of exact, semantic"),
        ("- {question: q}\n", "'path' must be a non-empty string"),
        ("- {question: '', path: a.md}\n", "'question' must be a non-empty string"),
        ("question: q\n", "expected a list of questions"),
        ("[]\n", "no questions"),
        ("- {question: q, path: '../a.md'}\n", "path: '../a.md' is not a path relative"),
    ],
)
def test_question_file_errors_name_file_and_question(tmp_path: Path, content: str, message: str) -> None:
    file = tmp_path / "q.yaml"
    file.write_text(content, encoding="utf-8")
    with pytest.raises(NotesSearchError, match=message) as info:
        load_questions(file, {"notes"})
    assert str(file) in str(info.value)


# ---- `notes-search eval` on the fixture notes -------------------------------------------------


class Embedders:
    """Hands the CLI fake embedders; `down` makes the next ones unreachable."""

    def __init__(self) -> None:
        self.down = False

    def __call__(self, config: EmbeddingConfig) -> FakeEmbedder:
        embedder = FakeEmbedder(config)
        embedder.down = self.down
        return embedder


@pytest.fixture
def embedders(monkeypatch: pytest.MonkeyPatch) -> Embedders:
    factory = Embedders()
    monkeypatch.setattr(cli_module, "make_embedder", factory)
    monkeypatch.setitem(cli_module.cli.commands, "eval", eval_command)  # as the CLI registers it
    return factory


@pytest.fixture
def run(config_path: Path, embedders: Embedders):  # type: ignore[no-untyped-def]
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(cli_module.cli, ["--config", str(config_path), *args], catch_exceptions=False)

    return invoke


QUESTIONS = """\
- question: "5432"
  path: devops/postgres.md
  kind: exact
- question: "ERR_CONN_RESET"
  path: "notes:devops/postgres.md:1-3"
  kind: exact
- question: "RTO"
  path: "devops/zalohovani.md:11"
  kind: exact
- question: "flour water starter"
  path: cooking/sourdough.md
  kind: semantic
- question: "Поезд из Москвы"
  path: travel/kazan.md
  kind: semantic
- question: "restic záloha databáze"
  path: "devops/zalohovani.md:1-3"
  kind: semantic
"""


@both_backends
def test_eval_scores_every_mode_by_kind(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("sync").exit_code == 0
    file = tmp_path / "questions.yaml"
    file.write_text(QUESTIONS, encoding="utf-8")
    result = run("eval", str(file), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["questions"] == 6 and set(data["modes"]) == {"lex", "vec", "hybrid"}
    lex = data["modes"]["lex"]
    assert lex["failed"] is False and set(lex["scores"]) == {"exact", "semantic", "all"}
    assert lex["scores"]["exact"] == {"questions": 3, "recall@1": 1.0, "recall@5": 1.0, "recall@10": 1.0, "mrr": 1.0}
    # lines 1-3 of zalohovani.md are front matter, in no chunk: the file matches, the span never does
    for mode in ("lex", "vec", "hybrid"):
        misses = data["modes"][mode]["misses"]
        front = [m for m in misses if m["expected"] == "devops/zalohovani.md:1-3"]
        assert front and front[0]["rank"] is None and front[0]["first"].startswith("notes:devops/zalohovani.md:")
        assert data["modes"][mode]["scores"]["semantic"]["recall@10"] == 0.6667  # rounded to 4 places
    human = run("eval", str(file))
    assert human.exit_code == 0
    assert "lex     exact        3  1.000  1.000  1.000  1.000" in human.stdout
    assert "expected devops/zalohovani.md:1-3 (not in top 10); first: notes:devops/zalohovani.md:" in human.stdout


def test_eval_refuses_expected_files_missing_from_the_index(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    file = tmp_path / "q.yaml"
    file.write_text(
        "- {question: a, path: devops/nope.md}\n- {question: b, path: 'other:devops/postgres.md'}\n", encoding="utf-8"
    )
    result = run("eval", str(file))
    assert result.exit_code == 1
    assert "expected files not in the index: devops/nope.md" in result.output
    assert "other:devops/postgres.md" in result.output


def test_eval_reports_a_mode_it_cannot_run(run, embedders: Embedders, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    embedders.down = True
    file = tmp_path / "q.yaml"
    file.write_text("- {question: '5432', path: devops/postgres.md}\n", encoding="utf-8")
    data = json.loads(run("eval", str(file), "--json").stdout)["modes"]
    assert data["lex"]["scores"]["all"]["recall@1"] == 1.0 and data["lex"]["notice"] is None
    assert data["vec"]["failed"] is True and "unreachable" in data["vec"]["notice"] and data["vec"]["scores"] is None
    assert data["hybrid"]["failed"] is False and data["hybrid"]["notice"].startswith(
        "degraded: vector search unavailable"
    )
    human = run("eval", str(file), "--mode", "vec", "--mode", "hybrid").stdout
    assert "vec     unavailable: embedding server" in human and "note: hybrid: degraded:" in human
    assert "lex " not in human


def test_question_files_are_read_like_the_config(tmp_path: Path) -> None:
    """A key written twice names both lines; a FIFO or a huge file is refused at once instead of
    hanging or parsing for seconds; every problem is one error naming the file."""
    import os

    twice = tmp_path / "twice.yaml"
    twice.write_text("- question: one\n  path: a.md\n  path: b.md\n", encoding="utf-8")
    with pytest.raises(NotesSearchError, match=r"duplicate key \(lines 2 and 3\)"):
        load_questions(twice, {"notes"})
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(NotesSearchError, match="not a regular file"):
        load_questions(fifo, {"notes"})
    huge = tmp_path / "huge.yaml"
    huge.write_text("- question: x\n  path: a.md\n" + "#" * (2 << 20) + "\n", encoding="utf-8")
    with pytest.raises(NotesSearchError, match="the limit is"):
        load_questions(huge, {"notes"})
    with pytest.raises(NotesSearchError, match="no such question file"):
        load_questions(tmp_path / "missing.yaml", {"notes"})
