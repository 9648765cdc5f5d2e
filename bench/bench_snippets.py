"""What an agent pays per MCP `search` (k=8) with `detail: snippet` vs `text`, and whether each
hit's `match_line` is a line that holds the query.

    .venv/bin/python -m bench.bench_snippets [--quick] [--no-machine]

Sets: examples/notes with examples/questions.yaml, and the BEIR sets under ../shared/eval/
(each passage a note, a deterministic sample of the judged queries; a missing set is skipped).
Indexed by the real sync with the fake (hash) embedder: bytes depend on which hits come back and
how long their fields are, not on the model, and the same index answers both detail modes. Every
query runs through `NotesTools.search` (what the MCP tool returns) in both modes; the bytes are
those of the tool's one text content (`tool_answer`: compact JSON, sent once). Same hits: both modes must
return the same refs, match lines, breadcrumbs and scores for every query (recall is then equal
by construction; recall@8, a hit in the relevant file, is printed for both). Match lines: for every keyword hit (BM25 rank set)
of the example questions, in hybrid and lex mode, the file's line at `match_line` is read from
disk (as `show` prints it) and must hold a query term under the index's folding and prefix rules.
Targets: median snippet-mode bytes <= 4 KB; match line holds a term for >= 95 % of keyword hits.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/bench_snippets.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.machine import REPO
from bench.report import arg_parser, eprint, md_table, report, verdict

K = 8
BYTES_TARGET = 4096
MATCH_TARGET = 0.95
QUERIES_PER_SET = 200
QUICK_QUERIES = 40
# beside the checkout (as bench.beir expects), or beside the folder of a git worktree
EVAL_ROOT = next(
    (root for root in (REPO.parent / "shared" / "eval", REPO.parent.parent / "shared" / "eval") if root.is_dir()),
    REPO.parent / "shared" / "eval",
)
BEIR_SETS = ("xquad-ru", "tydiqa-goldp-ru", "scifact")
FAKE_EMBEDDING = "embedding:\n  provider: ollama\n  model: fake:1\n  endpoint: http://fake.invalid\n  dims: 64\n"


@dataclass
class Question:
    text: str
    path: str  # the relevant file, relative to the source root


@dataclass
class SetRun:
    name: str
    notes: int
    questions: int
    text_bytes: list[int]
    snippet_bytes: list[int]
    same_hits: int
    recall_text: float
    recall_snippet: float


def example_questions() -> list[Question]:
    import yaml

    items = yaml.safe_load((REPO / "examples" / "questions.yaml").read_text(encoding="utf-8"))
    return [Question(str(item["question"]), str(item["path"])) for item in items]


def beir_workspace(name: str, docs: Path, limit: int) -> list[Question] | None:
    """Write the set's passages as notes; the sampled questions with their relevant note."""
    from bench.beir import doc_filename, load_set, write_workspace

    folder = EVAL_ROOT / name
    if not (folder / "corpus.jsonl").exists():
        return None
    data = load_set(folder)
    write_workspace(data, docs)
    judged = [
        Question(text, doc_filename(next(iter(data.qrels[qid]))))
        for qid, text in sorted(data.queries.items())
        if data.qrels.get(qid)
    ]
    return random.Random(13).sample(judged, min(limit, len(judged)))


def indexed_tools(root: Path, docs: Path) -> Any:  # -> NotesTools
    """A synced index of `docs` and the MCP tools over it, both with the fake embedder."""
    from indexer.config import load_config
    from indexer.sync import run_sync
    from search.mcp_server import NotesTools
    from search.service import NotesService
    from tests.fakes import FakeEmbedder

    config_path = root / "config.yaml"
    config_path.write_text(
        f"root: {json.dumps(str(root))}\ndb: index.sqlite\nlog: sync.log\n{FAKE_EMBEDDING}"
        f'sources:\n  workspace:\n    notes:\n      root: {json.dumps(str(docs))}\n      paths: ["**"]\n',
        encoding="utf-8",
    )
    config = load_config(config_path)
    embedder = FakeEmbedder(config.embedding)
    report = run_sync(config, embedder_factory=lambda: embedder)
    if report.pending:
        raise RuntimeError(f"{report.pending} chunks left without vectors")
    return NotesTools(NotesService(config, lambda _cfg: embedder))


def response_bytes(data: dict[str, Any]) -> int:
    from search.mcp_server import tool_answer

    [content] = tool_answer(data).content
    return len(content.text.encode())  # type: ignore[union-attr]


def hit_key(hit: dict[str, Any]) -> tuple[object, ...]:
    """What makes two answers the same hits (detail=snippet shortens the snippet, drops the rest)."""
    return (hit["ref"], hit["match_line"], hit["score"], hit["breadcrumb"], hit.get("rev"))


def ref_path(ref: str) -> str:
    """The path of a `source:path:line` ref."""
    return ref.split(":", 1)[1].rsplit(":", 1)[0]


def run_set(name: str, tools: Any, notes: int, questions: list[Question]) -> SetRun:
    text_bytes, snippet_bytes = [], []
    same = found_text = found_snippet = 0
    for question in questions:
        full = tools.search(question.text, None, K, "hybrid", detail="text")
        short = tools.search(question.text, None, K, "hybrid", detail="snippet")
        text_bytes.append(response_bytes(full))
        snippet_bytes.append(response_bytes(short))
        same += [hit_key(h) for h in full["results"]] == [hit_key(h) for h in short["results"]]
        found_text += any(ref_path(h["ref"]) == question.path for h in full["results"])
        found_snippet += any(ref_path(h["ref"]) == question.path for h in short["results"])
    n = max(1, len(questions))
    return SetRun(name, notes, len(questions), text_bytes, snippet_bytes, same, found_text / n, found_snippet / n)


def match_lines(tools: Any, notes: Path, questions: Iterable[Question]) -> dict[str, tuple[int, int]]:
    """Per mode: (keyword hits whose match line on disk holds a query term, keyword hits)."""
    from indexer.filetext import text_lines
    from search.snippets import snippet_terms, term_spans

    counts: dict[str, tuple[int, int]] = {}
    for mode in ("hybrid", "lex"):
        holding = total = 0
        for question in questions:
            terms = snippet_terms(question.text)
            response = tools.service.search(question.text, k=K, mode=mode).response
            for hit in response.results:
                if hit.explain.get("bm25_rank") is None:
                    continue
                line = text_lines((notes / hit.path).read_text(encoding="utf-8"))[hit.match_line - 1]
                total += 1
                holding += any(term_spans(terms, line.removesuffix("\r")))
        counts[mode] = (holding, total)
    return counts


def kb(n: float) -> str:
    return f"{n / 1024:.1f} KB"


def measure(quick: bool) -> str:
    limit = QUICK_QUERIES if quick else QUERIES_PER_SET
    runs: list[SetRun] = []
    lines: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-snippets-") as tmp:
        import shutil

        root = Path(tmp) / "examples"
        shutil.copytree(REPO / "examples" / "notes", root / "notes")
        tools = indexed_tools(root, root / "notes")
        questions = example_questions()
        eprint(f"examples: {len(questions)} questions")
        runs.append(run_set("examples", tools, sum(1 for _ in (root / "notes").rglob("*.md")), questions))
        lines = match_lines(tools, root / "notes", questions)
        for name in BEIR_SETS:
            root = Path(tmp) / name
            beir_questions = beir_workspace(name, root / "notes", limit)
            if beir_questions is None:
                eprint(f"{name}: not found under {EVAL_ROOT}, skipped")
                continue
            eprint(f"{name}: indexing, then {len(beir_questions)} questions")
            tools = indexed_tools(root, root / "notes")
            runs.append(run_set(name, tools, sum(1 for _ in (root / "notes").iterdir()), beir_questions))
    every_snippet = [b for r in runs for b in r.snippet_bytes]
    median_snippet = statistics.median(every_snippet)
    table = md_table(
        [
            "set",
            "notes",
            "queries",
            "text: median",
            "snippet: median",
            "snippet: p90",
            "ratio",
            "same hits",
            "recall@8 text / snippet",
        ],
        [
            [
                r.name,
                r.notes,
                r.questions,
                kb(statistics.median(r.text_bytes)),
                kb(statistics.median(r.snippet_bytes)),
                kb(sorted(r.snippet_bytes)[int(0.9 * (len(r.snippet_bytes) - 1))]),
                f"{statistics.median(r.snippet_bytes) / statistics.median(r.text_bytes):.2f}",
                f"{r.same_hits}/{r.questions}",
                f"{r.recall_text:.3f} / {r.recall_snippet:.3f}",
            ]
            for r in runs
        ],
    )
    all_same = all(r.same_hits == r.questions for r in runs)
    match_table = md_table(
        ["mode", "keyword hits", "match line holds a query term", "share"],
        [[mode, total, holding, f"{holding / max(1, total):.3f}"] for mode, (holding, total) in lines.items()],
    )
    worst = min(holding / max(1, total) for holding, total in lines.values())
    body = "\n".join(
        [
            f"MCP `search` response bytes at k={K} (hybrid), `detail: text` vs `detail: snippet`:",
            "",
            table,
            "",
            f"Median over all {len(every_snippet)} queries with `detail: snippet`: {kb(median_snippet)} "
            f"(target <= {kb(BYTES_TARGET)}): {verdict(median_snippet <= BYTES_TARGET)}; "
            f"identical hits in both modes: {verdict(all_same)}.",
            "",
            "Match lines of keyword hits on examples/questions.yaml (the line read from the file on disk):",
            "",
            match_table,
            "",
            f"Target >= {MATCH_TARGET:.0%}: {verdict(worst >= MATCH_TARGET)}.",
        ]
    )
    return body


def run(quick: bool, with_machine: bool) -> str:
    return report(
        "Snippets: MCP bytes per search and match lines", "snippets", [("measure", measure)], quick, with_machine
    )


def main() -> int:
    args = arg_parser(__doc__, f"{QUICK_QUERIES} instead of {QUERIES_PER_SET} queries per BEIR set").parse_args()
    print(run(args.quick, not args.no_machine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
