"""Measured quality: retrieval metrics (pure functions) and `notes-search eval` over a question file.

The metrics follow trec_eval / pytrec_eval (what BEIR and MTEB report), so our figures are
comparable with published ones:

- nDCG@k: gain = the graded relevance, discount log2(rank + 1), ideal DCG from the judged
  relevances sorted best first (not from what was retrieved).
- recall@k: relevant documents in the top k / all relevant documents.
- reciprocal rank: 1 / rank of the first relevant result (0 when none).

`notes-search eval FILE` asks the user's own questions (a YAML list or JSONL of
`{question, path, kind}`) in every mode and scores where the expected file landed in the top
10: a result counts when its file matches and, if the expected path carries a line range,
its line span overlaps that range. `path` is an index path (relative to the source root, as
query results print it), never a disk path.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.config import Config, read_user_file
from indexer.errors import NotesSearchError
from indexer.store import IndexReader
from indexer.useryaml import InvalidYaml, load_yaml
from search.engine import search
from search.hits import Hit
from search.refs import Ref

if TYPE_CHECKING:
    from indexer.embedders import Embedder


def dcg(gains: Sequence[float], k: int) -> float:
    """Discounted cumulative gain of the first k gains (rank r is discounted by log2(r + 1))."""
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains[:k], 1) if gain)


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k of one ranking of document ids against graded judgements (relevance > 0 counts)."""
    ideal = dcg(sorted((rel for rel in qrels.values() if rel > 0), reverse=True), k)
    if ideal == 0:
        return 0.0
    return dcg([max(qrels.get(doc, 0), 0) for doc in ranked], k) / ideal


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents (relevance > 0) found in the top k."""
    relevant = {doc for doc, rel in qrels.items() if rel > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def reciprocal_rank(ranked: Sequence[str], qrels: Mapping[str, int], k: int | None = None) -> float:
    """1 / rank of the first relevant document within the top k (all ranks when k is None)."""
    for rank, doc in enumerate(ranked[:k] if k else ranked, 1):
        if qrels.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; 0 for no values (an empty group scores nothing rather than failing)."""
    return sum(values) / len(values) if values else 0.0


def recall_at_rank(ranks: Sequence[int | None], k: int) -> float:
    """Share of questions (one expected target each) whose target is ranked within the top k."""
    return mean([1.0 if rank is not None and rank <= k else 0.0 for rank in ranks])


def mean_reciprocal_rank(ranks: Sequence[int | None]) -> float:
    """Mean of 1 / rank over questions; a target not retrieved counts 0."""
    return mean([1.0 / rank if rank else 0.0 for rank in ranks])


# ---- the question file -----------------------------------------------------------------------

KINDS = ("exact", "semantic")
QUESTION_KEYS = {"question", "path", "kind"}
CUTOFFS = (1, 5, 10)
DEPTH = max(CUTOFFS)  # results fetched per question and mode: ranks beyond it count as not found

_LINES = re.compile(r"^(?P<path>.+?):(?P<start>\d+)(?:-(?P<end>\d+))?$")


@dataclass(frozen=True)
class ExpectedLocation:
    """Where the answer lives: a file (index path, relative to its source root), optionally
    only in one source, optionally a 1-based inclusive line range."""

    path: str
    source: str | None = None
    start: int | None = None
    end: int | None = None

    def matches(self, hit: Hit) -> bool:
        if hit.path != self.path or (self.source is not None and hit.source != self.source):
            return False
        if self.start is None or self.end is None:
            return True
        return hit.line <= self.end and hit.end_line >= self.start

    def __str__(self) -> str:
        text = str(Ref(self.source or None, self.path))
        if self.start is not None:
            text += f":{self.start}" if self.start == self.end else f":{self.start}-{self.end}"
        return text


@dataclass(frozen=True)
class Question:
    text: str
    target: ExpectedLocation
    kind: str | None = None


def parse_target(text: str, sources: Collection[str]) -> ExpectedLocation:
    """`[SOURCE:]PATH[:LINE | :START-END]`; SOURCE only when it names a configured source."""
    text = text.strip()
    source = None
    head, sep, rest = text.partition(":")
    if sep and head in sources:
        source, text = head, rest
    start = end = None
    lines = _LINES.match(text)
    if lines:
        text = lines["path"]
        start = int(lines["start"])
        end = int(lines["end"]) if lines["end"] else start
        if start < 1 or end < start:
            raise ValueError(f"line range {start}-{end} is empty or not 1-based")
    path = text.strip().removeprefix("./").strip("/")
    if not path or path.startswith("../") or "/../" in f"/{path}/":
        raise ValueError(f"{text!r} is not a path relative to a source root")
    return ExpectedLocation(path, source, start, end)


def _raw_items(file: Path) -> list[tuple[str, object]]:
    """(where, item) pairs from a YAML list or a JSONL file."""
    content = read_user_file(file, "question file")
    if file.suffix.lower() in (".jsonl", ".ndjson"):
        items: list[tuple[str, object]] = []
        for number, line in enumerate(content.splitlines(), 1):
            if line.strip():
                try:
                    items.append((f"{file}:{number}", json.loads(line)))
                except ValueError as exc:
                    raise NotesSearchError(f"{file}:{number}: invalid JSON: {exc}") from None
        return items
    try:
        data = load_yaml(content, str(file))
    except RecursionError:
        raise NotesSearchError(f"{file}: invalid YAML: nested too deeply") from None
    except InvalidYaml as exc:
        where = f":{exc.line}" if exc.line is not None else ""
        raise NotesSearchError(f"{file}{where}: invalid YAML: {exc.problem or exc}") from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise NotesSearchError(f"{file}: expected a list of questions, got {type(data).__name__}")
    return [(f"{file}: question {number}", item) for number, item in enumerate(data, 1)]


def load_questions(file: Path, sources: Collection[str]) -> list[Question]:
    """Read and validate a question file; every error names the file and the question."""
    questions: list[Question] = []
    for where, item in _raw_items(file):
        if not isinstance(item, dict):
            raise NotesSearchError(f"{where}: expected a mapping with question and path, got {type(item).__name__}")
        unknown = sorted(set(map(str, item)) - QUESTION_KEYS)
        if unknown:
            raise NotesSearchError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(QUESTION_KEYS))})")
        text, path, kind = item.get("question"), item.get("path"), item.get("kind")
        if not isinstance(text, str) or not text.strip():
            raise NotesSearchError(f"{where}: 'question' must be a non-empty string")
        if not isinstance(path, str) or not path.strip():
            raise NotesSearchError(f"{where}: 'path' must be a non-empty string ([SOURCE:]PATH[:LINE[-END]])")
        if kind is not None and kind not in KINDS:
            raise NotesSearchError(f"{where}: 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
        try:
            target = parse_target(path, sources)
        except ValueError as exc:
            raise NotesSearchError(f"{where}: path: {exc}") from None
        questions.append(Question(text.strip(), target, kind))
    if not questions:
        raise NotesSearchError(f"{file}: no questions")
    return questions


def unknown_targets(store: IndexReader, questions: Sequence[Question]) -> list[str]:
    """Expected files the index does not hold: a typo would otherwise count as a miss forever."""
    problems = []
    for question in questions:
        holders = store.sources_with_file(question.target.path)
        source = question.target.source
        if not holders or (source is not None and source not in holders):
            problems.append(f"{question.target} (question {question.text!r})")
    return problems


# ---- the run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    question: Question
    rank: int | None  # 1-based rank of the first result that matches the target, within DEPTH
    first: Hit | None  # what came first


@dataclass
class ModeRun:
    mode: str
    outcomes: list[Outcome] = field(default_factory=list)
    notice: str | None = None  # why the mode could not run, or ran degraded
    failed: bool = False

    def scores(self, kind: str | None = None) -> dict[str, float | int]:
        ranks = [o.rank for o in self.outcomes if kind is None or o.question.kind == kind]
        scores: dict[str, float | int] = {"questions": len(ranks)}
        for k in CUTOFFS:
            scores[f"recall@{k}"] = round(recall_at_rank(ranks, k), 4)
        scores["mrr"] = round(mean_reciprocal_rank(ranks), 4)
        return scores


@dataclass
class EvalReport:
    file: str
    questions: list[Question]
    runs: list[ModeRun]

    def kinds(self) -> list[str]:
        present = {q.kind for q in self.questions}
        return [kind for kind in KINDS if kind in present]

    def to_json(self) -> dict[str, object]:
        modes: dict[str, object] = {}
        for run in self.runs:
            groups: dict[str, object] = {kind: run.scores(kind) for kind in self.kinds()}
            groups["all"] = run.scores()
            modes[run.mode] = {
                "failed": run.failed,
                "notice": run.notice,
                "scores": None if run.failed else groups,
                "misses": [] if run.failed else [_miss_json(o) for o in run.outcomes if o.rank != 1],
            }
        return {"file": self.file, "questions": len(self.questions), "depth": DEPTH, "modes": modes}


def _where(hit: Hit) -> str:
    return str(Ref(hit.source, hit.path, hit.line))


def _miss_json(outcome: Outcome) -> dict[str, object]:
    return {
        "question": outcome.question.text,
        "kind": outcome.question.kind,
        "expected": str(outcome.question.target),
        "rank": outcome.rank,
        "first": _where(outcome.first) if outcome.first else None,
    }


def first_match(hits: Sequence[Hit], target: ExpectedLocation) -> int | None:
    """1-based rank of the first hit on the target: later hits in the same file add nothing."""
    return next((rank for rank, hit in enumerate(hits, 1) if target.matches(hit)), None)


def run_eval(
    store: IndexReader,
    config: Config,
    questions: Sequence[Question],
    *,
    embedder_factory: Callable[[], Embedder],
    modes: Sequence[str] = ("lex", "vec", "hybrid"),
    file: str = "",
) -> EvalReport:
    """Ask every question in every mode; a mode the index or the embedder cannot serve is
    reported as failed with the reason, never silently scored as zeros."""
    runs: list[ModeRun] = []
    for mode in modes:
        run = ModeRun(mode)
        try:
            for question in questions:
                response = search(store, config, question.text, k=DEPTH, mode=mode, embedder_factory=embedder_factory)
                if response.degraded and run.notice is None:
                    run.notice = f"degraded: {response.notice}"
                hits = response.results
                run.outcomes.append(Outcome(question, first_match(hits, question.target), hits[0] if hits else None))
        except NotesSearchError as exc:  # reindex needed, embedder down in vec mode
            run = ModeRun(mode, notice=str(exc), failed=True)
        runs.append(run)
    return EvalReport(file, list(questions), runs)


# ---- output ----------------------------------------------------------------------------------


def report_lines(report: EvalReport) -> list[str]:
    """A plain-text table per mode and kind, then the misses (expected not ranked first); one
    item per printed line, so a newline inside a question is escaped, not a line break."""
    kinds = report.kinds()
    counts = ", ".join(f"{kind} {sum(q.kind == kind for q in report.questions)}" for kind in kinds)
    lines = [f"{len(report.questions)} questions" + (f" ({counts})" if counts else "") + f", top {DEPTH} per mode", ""]
    header = f"{'mode':<7} {'kind':<9} {'n':>4} " + " ".join(f"{'R@' + str(k):>6}" for k in CUTOFFS) + f" {'MRR':>6}"
    lines += [header, "-" * len(header)]
    for run in report.runs:
        if run.failed:
            lines.append(f"{run.mode:<7} unavailable: {run.notice}")
            continue
        for kind in [*kinds, None]:
            s = run.scores(kind)
            cells = " ".join(f"{s[f'recall@{k}']:>6.3f}" for k in CUTOFFS)
            lines.append(f"{run.mode:<7} {kind or 'all':<9} {s['questions']:>4} {cells} {s['mrr']:>6.3f}")
    for run in report.runs:
        if run.notice and not run.failed:
            lines.append(f"note: {run.mode}: {run.notice}")
    for run in report.runs:
        misses = [o for o in run.outcomes if o.rank != 1]
        if run.failed or not misses:
            continue
        lines += ["", f"{run.mode}: {len(misses)} not ranked first"]
        for o in misses:
            rank = f"rank {o.rank}" if o.rank else f"not in top {DEPTH}"
            first = _where(o.first) if o.first else "no results"
            lines.append(f"  [{o.question.kind or '-'}] {o.question.text}")
            lines.append(f"      expected {o.question.target} ({rank}); first: {first}")
    return lines
