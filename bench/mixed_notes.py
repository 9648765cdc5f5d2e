"""Mixed-language personal notes: three real collections in one index, hand-written questions.

    .venv/bin/python -m bench.mixed_notes [--data /work/shared/eval] [--quick] [--json] [--misses N]

The corpora (`../shared/eval/corpora/`): `simonw-til-en` (one person's English TIL notes),
`notes-sysops-ru` (one person's Russian sysadmin notes, English terms inside) and
`linux-spellbook-cs` (a Czech Linux reference). Each folder becomes one workspace source of a
fresh index, synced by `run_sync` with the local model (vectors from bench/beir.py's cache, so
only the first run embeds), and every question of `bench/data/mixed_notes_questions.yaml` runs
through `NotesService.search` as the CLI's `query` does, in modes hybrid, lex and vec.

The questions were written from reading the notes, before any search ran over them. Kinds:
`short` (2-4 words as typed into a search box, inflected), `question` (a full question in
other words than the note's), `exact` (a command, flag, port or path as the note writes it) and
`cross` (a question in another language than the note). A file ranks at its best chunk.
Reported per mode and per category (question language x kind): recall@5 and MRR@10 of the
answer notes (grade 2), nDCG@10 over both grades, and the target "hybrid >= the better of lex
and vec" with a verdict per category.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # `python bench/mixed_notes.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import yaml

from bench.beir import LOCAL_EMBEDDING, CachingEmbedder, embed_progress
from bench.machine import REPO, eval_root
from bench.report import eprint, header, machine_table, md_table, verdict
from indexer.config import EmbeddingConfig, load_config
from indexer.embedders import Embedder, make_embedder
from indexer.sync import run_sync
from search.evaluate import mean, ndcg_at_k, recall_at_k, reciprocal_rank
from search.service import NotesService

QUESTIONS = REPO / "bench" / "data" / "mixed_notes_questions.yaml"
CORPORA = {"simonw-til-en": "en", "notes-sysops-ru": "ru", "linux-spellbook-cs": "cs"}  # folder -> language
LANGS = ("cs", "en", "ru")
KINDS = ("short", "question", "exact", "cross")
MODES = ("hybrid", "lex", "vec")
METRICS = ("recall@5", "mrr@10", "ndcg@10")
HITS = 30  # hits asked per question (the CLI's -k): enough distinct files for nDCG@10
QUICK_QUESTIONS = 40

Log = Callable[[str], None]


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    lang: str  # the question's language
    kind: str
    note_lang: str  # the language of the note(s) judged most relevant
    relevant: dict[str, int]  # "corpus/path/inside.md" -> grade (2 = the answer, 1 = related)

    @property
    def category(self) -> str:
        return f"{self.lang}-{self.kind}"


class BadQuestions(ValueError):
    """The question file does not follow its schema."""


def load_questions(path: Path = QUESTIONS, corpora: Path | None = None) -> list[Question]:
    """The questions, checked: known language and kind, a cross question in another language than
    its note, grades 1-2, and (when `corpora` is given) every relevant file present there."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not isinstance(raw.get("questions"), list):
        raise BadQuestions(f"{path}: expected a mapping with a `questions` list")
    out: list[Question] = []
    seen: set[str] = set()
    for n, item in enumerate(raw["questions"], 1):
        where = f"{path.name}: question {n}"
        if not isinstance(item, dict) or set(item) != {"id", "text", "lang", "kind", "note_lang", "relevant"}:
            raise BadQuestions(f"{where}: keys must be id, text, lang, kind, note_lang, relevant")
        q = Question(
            str(item["id"]),
            str(item["text"]),
            str(item["lang"]),
            str(item["kind"]),
            str(item["note_lang"]),
            {str(k): int(v) for k, v in (item["relevant"] or {}).items()},
        )
        problem = _problem(q, seen, corpora)
        if problem:
            raise BadQuestions(f"{where} ({q.id}): {problem}")
        seen.add(q.id)
        out.append(q)
    return out


def _problem(q: Question, seen: set[str], corpora: Path | None) -> str | None:
    if q.id in seen:
        return "id used twice"
    if q.lang not in LANGS or q.note_lang not in LANGS:
        return f"languages must be among {LANGS}"
    if q.kind not in KINDS:
        return f"kind must be one of {KINDS}"
    if (q.kind == "cross") != (q.lang != q.note_lang):
        return "a cross question is in another language than its note, and only a cross question"
    if not q.text.strip():
        return "empty text"
    if q.kind == "short" and not 2 <= len(q.text.split()) <= 4:
        return "a short query has 2-4 words"
    if not any(grade == 2 for grade in q.relevant.values()) or any(g not in (1, 2) for g in q.relevant.values()):
        return "relevant needs at least one file of grade 2, and grades are 1 or 2"
    for ref in q.relevant:
        if ref.split("/", 1)[0] not in CORPORA:
            return f"{ref}: not in one of the corpora {sorted(CORPORA)}"
        if corpora is not None and not (corpora / ref).is_file():
            return f"{ref}: no such file under {corpora}"
    if not any(CORPORA[ref.split("/", 1)[0]] == q.note_lang for ref in answers(q)):
        return f"no answer (grade 2) in a {q.note_lang} corpus, as note_lang says"
    return None


def answers(q: Question) -> list[str]:
    """The notes holding the answer (grade 2)."""
    return [ref for ref, grade in q.relevant.items() if grade == 2]


# ---- indexing and searching ----------------------------------------------------------------


def write_config(workdir: Path, corpora: Path) -> Path:
    """One workspace source per corpus folder (source id = folder name); index and log in `workdir`."""
    sources = "".join(
        f'    {name}:\n      root: {json.dumps(str(corpora / name))}\n      paths: ["**"]\n' for name in CORPORA
    )
    config = workdir / "config.yaml"
    config.write_text(
        f"root: {json.dumps(str(workdir))}\ndb: db/index.sqlite\nlog: log/sync.log\n{LOCAL_EMBEDDING}"
        f"sources:\n  workspace:\n{sources}",
        encoding="utf-8",
    )
    return config


@dataclass
class Run:
    files: int = 0
    chunks: int = 0
    sync_seconds: float = 0.0
    computed_now: int = 0  # vectors the model computed in this run (cache misses)
    rankings: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # mode -> qid -> files best first


def index_and_search(
    questions: Sequence[Question],
    corpora: Path,
    workdir: Path,
    *,
    modes: Sequence[str] = MODES,
    cache: Path | None = None,
    log: Log = eprint,
) -> Run:
    """Sync the three corpora into a fresh index in `workdir`, then run every question in every
    mode; a lex-only run indexes the text alone (no model, no vectors)."""
    config = load_config(write_config(workdir, corpora))
    embedders: list[CachingEmbedder] = []

    def cached(embedding: EmbeddingConfig) -> Embedder:
        embedders.append(CachingEmbedder(make_embedder(embedding), cache))
        return embedders[-1]

    service = NotesService(config, cached)
    embed = any(mode != "lex" for mode in modes)
    report = run_sync(
        config, embedder_factory=service.embedder if embed else None, progress=embed_progress("mixed-notes", log)
    )
    if embed and report.pending:
        raise RuntimeError(f"{report.pending} chunks left without vectors: {report.embed_notice}")
    run = Run(sync_seconds=report.seconds)
    with service.reading() as store:
        counts = store.counts()
    run.files, run.chunks = counts["files"], counts["chunks"]
    log(f"mixed-notes: {run.files} files, {run.chunks} chunks indexed in {report.seconds:.0f} s; searching")
    for mode in modes:
        run.rankings[mode] = {}
        for q in questions:
            response = service.search(q.text, k=HITS, mode=mode).response
            ranked: list[str] = []
            for hit in response.results:
                ref = f"{hit.source}/{hit.path}"
                if ref not in ranked:
                    ranked.append(ref)
            run.rankings[mode][q.id] = ranked
    run.computed_now = sum(e.misses for e in embedders)
    for embedder in embedders:
        embedder.close()
    return run


# ---- scoring and the report ----------------------------------------------------------------


def metrics(ranked: Sequence[str], relevant: Mapping[str, int]) -> dict[str, float]:
    """recall@5 and MRR@10 count the answers (grade 2) only, so a related note in another
    language is a bonus, not a requirement; nDCG@10 takes every grade."""
    answer = {ref: 1 for ref, grade in relevant.items() if grade == 2}
    return {
        "recall@5": recall_at_k(ranked, answer, 5),
        "mrr@10": reciprocal_rank(ranked, answer, 10),
        "ndcg@10": ndcg_at_k(ranked, relevant, 10),
    }


Scores = dict[str, dict[str, dict[str, float]]]  # mode -> category -> metric -> mean (+ "questions")


def scores(questions: Sequence[Question], run: Run) -> Scores:
    """Per mode: every category (language x kind), each language, each kind, and `all`."""
    out: Scores = {}
    for mode, rankings in run.rankings.items():
        groups: dict[str, list[dict[str, float]]] = {}
        for q in questions:
            m = metrics(rankings[q.id], q.relevant)
            for name in (q.category, f"{q.lang}-all", f"all-{q.kind}", "all"):
                groups.setdefault(name, []).append(m)
        out[mode] = {
            name: {**{k: mean([row[k] for row in rows]) for k in METRICS}, "questions": float(len(rows))}
            for name, rows in groups.items()
        }
    return out


def row_order(found: Mapping[str, object]) -> list[str]:
    names = [f"{lang}-{kind}" for lang in LANGS for kind in KINDS]
    names += [f"{lang}-all" for lang in LANGS] + [f"all-{kind}" for kind in KINDS] + ["all"]
    return [name for name in names if name in found]


def scores_table(result: Scores) -> str:
    modes = [mode for mode in MODES if mode in result]
    first = result[modes[0]]
    rows = []
    for name in row_order(first):
        cells: list[object] = [name, int(first[name]["questions"])]
        for metric in METRICS:
            cells += [f"{result[mode][name][metric]:.3f}" for mode in modes]
        rows.append(cells)
    heads = ["category", "questions"] + [f"{metric} {mode}" for metric in METRICS for mode in modes]
    return md_table(heads, rows)


def target_table(result: Scores) -> str:
    """hybrid >= max(lex, vec) on every metric, per category (language x kind)."""
    rows = []
    for name in row_order(result["hybrid"]):
        short: list[str] = []
        cells: list[object] = [name]
        for metric in METRICS:
            best = max(result["lex"][name][metric], result["vec"][name][metric])
            hybrid = result["hybrid"][name][metric]
            cells.append(f"{hybrid:.3f} / {best:.3f}")
            if hybrid + 1e-9 < best:
                short.append(metric)
        cells.append(verdict(not short) + (f" ({', '.join(short)})" if short else ""))
        rows.append(cells)
    return md_table(["category", *[f"{m}: hybrid / better half" for m in METRICS], "verdict"], rows)


def misses(questions: Sequence[Question], run: Run, mode: str, limit: int = 20) -> list[dict[str, object]]:
    """Questions whose answer (grade 2) is not in `mode`'s top 5: what came first instead."""
    out: list[dict[str, object]] = []
    for q in questions:
        ranked = run.rankings[mode][q.id]
        wanted = answers(q)
        rank = _rank(ranked, wanted)
        if rank is not None and rank <= 5:
            continue
        out.append(
            {
                "id": q.id,
                "text": q.text,
                "answer": wanted[0],
                "rank": rank,
                "ranks other modes": {m: _rank(run.rankings[m][q.id], wanted) for m in run.rankings if m != mode},
                "first": ranked[:3],
            }
        )
    return out[:limit]


def _rank(ranked: Sequence[str], answers: Sequence[str]) -> int | None:
    return next((i for i, ref in enumerate(ranked, 1) if ref in answers), None)


def misses_table(rows: Sequence[Mapping[str, object]], mode: str, others: Sequence[str]) -> str:
    other_ranks = [f"{' / '.join(others)} rank"] if others else []
    return md_table(
        ["question", "text", "answer", f"{mode} rank", *other_ranks, "came first"],
        [
            [
                r["id"],
                r["text"],
                r["answer"],
                r["rank"] or "-",
                *([" / ".join(str(v or "-") for v in r["ranks other modes"].values())] if others else []),  # type: ignore[attr-defined]
                "<br>".join(r["first"]) or "(nothing)",  # type: ignore[arg-type]
            ]
            for r in rows
        ],
    )


def run_bench(
    data: Path, *, quick: bool = False, modes: Sequence[str] = MODES, cache: Path | None = None, log: Log = eprint
) -> tuple[list[Question], Run] | None:
    corpora = data / "corpora"
    missing = [name for name in CORPORA if not (corpora / name).is_dir()]
    if missing:
        log(f"skipped mixed-notes: no {', '.join(missing)} under {corpora}")
        return None
    questions = load_questions(QUESTIONS, corpora)
    if quick:  # every n-th question: each category keeps its share
        questions = questions[:: max(1, len(questions) // QUICK_QUESTIONS)]
    with tempfile.TemporaryDirectory(prefix="mixed-notes-") as tmp:
        return questions, index_and_search(questions, corpora, Path(tmp), modes=modes, cache=cache, log=log)


def report(outcome: tuple[list[Question], Run] | None, quick: bool, with_machine: bool, shown_misses: int) -> str:
    parts = [header("Mixed-language personal notes (bench/mixed_notes.py)", quick).rstrip()]
    if with_machine:
        parts.append(machine_table())
    if outcome is None:
        parts.append("skipped: the corpora are not present (see the log)")
        return "\n\n".join(parts) + "\n"
    questions, run = outcome
    result = scores(questions, run)
    parts.append(
        f"{len(questions)} questions; index: {run.files} files, {run.chunks} chunks, sync {run.sync_seconds:.0f} s, "
        f"{run.computed_now} vectors computed now (the rest from the cache)"
    )
    parts.append(scores_table(result))
    if all(mode in result for mode in MODES):
        parts += ["Target: hybrid >= the better half, per category", target_table(result)]
    mode = "hybrid" if "hybrid" in run.rankings else next(iter(run.rankings))
    missed = misses(questions, run, mode, limit=shown_misses)
    if missed:
        others = [m for m in run.rankings if m != mode]
        parts += [
            f"{mode} misses (answer not in the top 5; at most {shown_misses} shown)",
            misses_table(missed, mode, others),
        ]
    return "\n\n".join(parts) + "\n"


def run(quick: bool, with_machine: bool) -> str:
    """The run_all convention: markdown out."""
    return report(run_bench(eval_root(), quick=quick), quick, with_machine, 20)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=eval_root(), help="folder holding corpora/")
    parser.add_argument("--quick", action="store_true", help=f"about {QUICK_QUESTIONS} of the questions")
    parser.add_argument("--no-machine", action="store_true", help="leave out the machine table")
    parser.add_argument("--cache", type=Path, help="vector cache file (default: under the XDG cache)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated; lex alone needs no model")
    parser.add_argument("--misses", type=int, default=20, help="misses to list (of hybrid, else the first mode)")
    parser.add_argument("--json", action="store_true", help="scores, per-question rankings and misses as JSON")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes takes some of {', '.join(MODES)}")
    outcome = run_bench(args.data, quick=args.quick, modes=modes, cache=args.cache)
    if args.json:
        if outcome is None:
            print(json.dumps(None))
        else:
            questions, result = outcome
            print(
                json.dumps(
                    {
                        "scores": scores(questions, result),
                        "rankings": result.rankings,
                        "misses": misses(
                            questions, result, "hybrid" if "hybrid" in modes else modes[0], len(questions)
                        ),
                    },
                    indent=2,
                    ensure_ascii=False,
                )
            )
    else:
        print(report(outcome, args.quick, not args.no_machine, args.misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
