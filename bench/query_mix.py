"""Experiment: the query's vector as a mix of its query-form and passage-form embeddings.

    .venv/bin/python -m bench.query_mix [--every N]

e5 embeds a question with the "query: " prefix and a note with "passage: "; the prefix moves a
query by a language-dependent amount (bench/EVAL.md, "Cross-lingual search"). This measures
whether averaging the query's own two embeddings, unit(q + a p) with p its "passage: " form,
brings a cross-lingual question closer to the note, on tldr-mixed (cross-cs and same) and
xquad-mixed-en-ru, through the real `search.engine.search` (hybrid and vec). Passage vectors of
the notes come from the bench cache only; the passage form of each question is computed by the
local model once and cached. Not part of run_all: it runs the model on new texts.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import numpy as np

from bench.beir import (
    BeirSet,
    CachingEmbedder,
    LazyEmbedder,
    rank_documents,
    score_queries,
    write_config,
    write_workspace,
)
from bench.bench_langid import eval_root
from bench.bench_mixed_latency import CacheOnly, Fixed
from bench.crosslingual import load, splits
from bench.report import md_table
from indexer.config import load_config
from indexer.embedders import make_embedder
from indexer.store import Store
from indexer.sync import run_sync

MIXES = (0.0, 0.5, 1.0)  # weight of the passage form; 0 = today


def evaluate(name: str, every: int, modes: tuple[str, ...]) -> list[list[object]]:
    loaded = load(name, eval_root())
    assert loaded is not None, name
    data, meta = loaded
    wanted = [
        qid
        for i, qid in enumerate(data.queries)
        if meta[qid]["kind"] != "code"
        and (name != "tldr-mixed" or set(splits(meta[qid])) & {"cross-cs", "same"})
        and i % every == 0
    ]
    subset = BeirSet(data.name, data.corpus, {q: data.queries[q] for q in wanted}, data.qrels)
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="nsb-query-mix-") as tmp:
        workdir = Path(tmp)
        by_path = write_workspace(data, workdir / "docs")
        config = load_config(write_config(workdir, workdir / "docs"))
        cache_only = LazyEmbedder(lambda: CachingEmbedder(CacheOnly(config.embedding), None))
        run_sync(config, embedder_factory=cache_only)
        model = CachingEmbedder(make_embedder(config.embedding), None)
        texts = [subset.queries[q] for q in wanted]
        queries = np.stack([model.embed_query(t) for t in texts])
        passages = model.embed_passages(texts)
        model.close()
        store = Store.open(config.db, readonly=True)
        try:
            for mix in MIXES:
                mixed = queries + mix * passages
                mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
                vectors = dict(zip(wanted, mixed, strict=True))
                for mode in modes:
                    rankings = {
                        q: rank_documents(
                            store,
                            config,
                            subset.queries[q],
                            mode,
                            by_path,
                            lambda vector=vectors[q]: Fixed(config.embedding, vector),
                        )
                        for q in wanted
                    }
                    per_query, _ = score_queries(subset, rankings)
                    groups: dict[str, list[dict[str, float]]] = {}
                    for qid, metrics in per_query.items():
                        for split in splits(meta[qid]):
                            groups.setdefault(split, []).append(metrics)
                    for split, scores in sorted(groups.items()):
                        rows.append(
                            [
                                name,
                                split,
                                mode,
                                f"{mix:g}",
                                len(scores),
                                f"{np.mean([s['ndcg@10'] for s in scores]):.4f}",
                                f"{np.mean([s['recall@10'] for s in scores]):.4f}",
                            ]
                        )
        finally:
            store.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=int, default=1, help="every n-th question only")
    parser.add_argument("--set", action="append", help="tldr-mixed and/or xquad-mixed-en-ru (default both)")
    args = parser.parse_args()
    rows: list[list[object]] = []
    for name in args.set or ("tldr-mixed", "xquad-mixed-en-ru"):
        rows += evaluate(name, args.every, ("vec", "hybrid"))
    print(md_table(["set", "split", "mode", "passage weight", "queries", "nDCG@10", "recall@10"], rows))


if __name__ == "__main__":
    main()
