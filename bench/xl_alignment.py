"""Experiment: alignments beyond per-language centring, replayed on the cached vectors.

    .venv/bin/python -m bench.xl_alignment [--embed] [--data ../shared/eval]

Both mixed-language sets (bench/crosslingual.py) are synced from the bench vector cache (the
model never runs for them), the raw passage vectors are restored from the stored neutral ones
(indexer.neutral.restore is exact) and every variant below is scored in numpy over the vector
half alone, a document at its best chunk, exactly as the engine's vec mode ranks (the first row
reproduces `bench.crosslingual` vec: xquad cross 0.835, tldr cross-cs recall@10 0.695).

Variants use only what an index or a shipped per-model file could hold: the index's own chunks,
tldr pages outside the tldr-mixed benchmark (`tldr_mixed.parallel_descriptions`: Russian and
English descriptions of 192 commands the benchmark never uses; there is no Czech pair outside
it, every Czech page is in the benchmark), or the page summaries. Two "oracle" rows are
diagnostics, not candidates. Vectors the cache lacks (page summaries, the parallel pairs: about
3,000 short texts, ~6 minutes of the local model) are computed only with --embed. --hybrid
also runs the two strongest rows without a learned map through the real engine (tldr-mixed,
`search.engine.search` as bench.crosslingual runs it; ~10 minutes a row on a loaded machine).
Not part of run_all: it is a one-off study whose figures are in bench/EVAL.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import numpy as np

from bench.beir import BeirSet, CachingEmbedder, LazyEmbedder, write_config, write_workspace
from bench.bench_langid import eval_root
from bench.bench_mixed_latency import CacheOnly
from bench.crosslingual import load
from bench.report import eprint, md_table
from bench.tldr_mixed import parallel_descriptions
from indexer import neutral
from indexer.config import EmbeddingConfig, load_config
from indexer.embedders import Embedder, make_embedder
from indexer.errors import EmbedderError
from indexer.language import detect_query_language
from indexer.store import Store
from indexer.sync import run_sync
from search.evaluate import ndcg_at_k, recall_at_k

MODEL = "multilingual-e5-small"


@dataclass
class Replay:
    """One set synced from the cache: per chunk its document, language, raw and stored vectors."""

    data: BeirSet
    meta: dict[str, dict[str, str]]
    docs: list[str]
    languages: np.ndarray
    raw: np.ndarray
    stored: np.ndarray
    stats: str
    qids: list[str]
    queries: np.ndarray
    query_languages: np.ndarray

    def engine_queries(self) -> np.ndarray:
        """The query vectors as the engine searches with them (projected off the index's language directions)."""
        basis = neutral.query_basis(self.stats)
        out = self.queries.copy()
        if basis is not None:
            for i, lang in enumerate(self.query_languages):
                if lang != neutral.UNKNOWN:
                    out[i] = neutral.project_query(out[i], basis)
        return out

    def split_names(self, qid: str) -> list[str]:
        info = self.meta[qid]
        names = [info["kind"]]
        if info["kind"] == "cross":
            if "cs" in (info.get("lang"), info.get("doc_lang")):
                names.append("cross-cs")
            if info.get("doc_lang"):
                names.append(f"{info['lang']}>{info['doc_lang']}")
        return names

    def score(self, scores: np.ndarray) -> dict[str, tuple[float, float]]:
        """split -> (nDCG@10, recall@10) of a (queries x chunks) score matrix, higher first."""
        order = np.argsort(-scores, axis=1)
        groups: dict[str, list[tuple[float, float]]] = {}
        for i, qid in enumerate(self.qids):
            qrels = self.data.qrels.get(qid, {})
            ranked: list[str] = []
            for j in order[i]:
                if self.docs[j] not in ranked:
                    ranked.append(self.docs[j])
                    if len(ranked) == 10:
                        break
            for name in self.split_names(qid):
                groups.setdefault(name, []).append((ndcg_at_k(ranked, qrels, 10), recall_at_k(ranked, qrels, 10)))
        return {
            name: (float(np.mean([a for a, _ in v])), float(np.mean([b for _, b in v]))) for name, v in groups.items()
        }


def replay(name: str, root: Path, workdir: Path, embedder: Embedder) -> Replay:
    loaded = load(name, root)
    assert loaded is not None, f"{name} not found under {root}"
    data, meta = loaded
    by_path = write_workspace(data, workdir / "docs")
    config = load_config(write_config(workdir, workdir / "docs"))
    report = run_sync(config, embedder_factory=LazyEmbedder(lambda: CachingEmbedder(CacheOnly(config.embedding))))
    assert not report.pending, f"{name}: {report.pending} chunks are not in the vector cache (run bench.crosslingual)"
    store = Store.open(config.db, readonly=True)
    try:
        matrix = store.all_vectors()
        ids = [int(i) for i in matrix.ids]
        languages = store.chunk_languages(ids)
        rows = store.chunk_rows(ids)
        stats = store.meta().get(neutral.STATS_KEY) or ""
    finally:
        store.close()
    chunk_languages = [languages[i] for i in ids]
    raw = neutral.NeutralSpace.from_json(stats).restore(matrix.matrix, chunk_languages)
    qids = list(data.queries)
    queries = embedder.embed_batch([data.queries[q] for q in qids], is_query=True)
    return Replay(
        data,
        meta,
        [by_path[rows[i].path] for i in ids],
        np.array(chunk_languages),
        raw,
        np.array(matrix.matrix),
        stats,
        qids,
        queries,
        np.array([detect_query_language(data.queries[q]) for q in qids]),
    )


def unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms == 0, 1, norms)


def ranks(scores: np.ndarray) -> np.ndarray:
    out = np.empty(scores.shape, dtype=np.int64)
    out[np.arange(len(scores))[:, None], np.argsort(-scores, axis=1)] = np.arange(scores.shape[1])[None, :]
    return out + 1


def space_with(r: Replay, edit: Callable[[neutral.NeutralSpace], None]) -> np.ndarray:
    """Scores under the index's statistics changed by `edit` (passages re-neutralised, query re-projected)."""
    space = neutral.NeutralSpace.from_json(r.stats)
    edit(space)
    passages = space.neutralise(r.raw, list(r.languages))
    basis = neutral.query_basis(space.to_json())
    queries = r.queries.copy()
    if basis is not None:
        known = r.query_languages != neutral.UNKNOWN
        queries[known] = unit(queries[known] - (queries[known] @ basis.T) @ basis)
    return queries @ passages.T


def scale_default_offsets(factor: float) -> Callable[[neutral.NeutralSpace], None]:
    """Languages on shipped defaults (too few chunks here) moved `factor` times as far from the centre."""

    def edit(space: neutral.NeutralSpace) -> None:
        weights = {lang: float(min(max(s.chunks, 1), neutral.MIN_CHUNKS)) for lang, s in space.languages.items()}
        centre = sum(s.mean * weights[lang] for lang, s in space.languages.items()) / sum(weights.values())
        for lang, s in list(space.languages.items()):
            if s.origin == neutral.DEFAULT:
                mean = (centre + factor * (s.mean - centre)).astype(np.float32)
                space.languages[lang] = neutral.LanguageStats(mean, s.chunks, s.origin)

    return edit


def procrustes(source: np.ndarray, target: np.ndarray, shrink: float) -> np.ndarray:
    """The orthogonal map nearest to `shrink` x (source -> target Procrustes) + (1 - shrink) x identity."""
    u, _, vt = np.linalg.svd(target.T @ source)
    blend = shrink * (u @ vt) + (1 - shrink) * np.eye(source.shape[1])
    u, _, vt = np.linalg.svd(blend)
    return np.asarray(u @ vt, dtype=np.float32)


def inlp_basis(vectors: np.ndarray, labels: np.ndarray, languages: list[str], shrink: float) -> np.ndarray:
    """Directions a linear (LDA) language classifier uses on these vectors (one nullspace step)."""
    means = {lang: vectors[labels == lang].mean(0) for lang in languages}
    total = sum(int((labels == lang).sum()) for lang in languages)
    within = sum(
        np.cov((vectors[labels == lang] - means[lang]).T, bias=True) * (labels == lang).sum() for lang in languages
    )
    within = within / total
    within = (1 - shrink) * within + shrink * np.trace(within) / len(within) * np.eye(len(within))
    centre = np.mean([means[lang] for lang in languages], axis=0)
    directions = np.stack([np.linalg.solve(within, means[lang] - centre) for lang in languages])
    _, _, vt = np.linalg.svd(directions, full_matrices=False)
    return np.asarray(vt[: len(languages) - 1], dtype=np.float32)


def variants(r: Replay, extra: dict[str, np.ndarray]) -> dict[str, np.ndarray | None]:
    """Variant name -> its score matrix (None when it needs vectors the cache lacks)."""
    queries, stored = r.engine_queries(), r.stored
    base = queries @ stored.T
    out: dict[str, np.ndarray | None] = {"today: centring + query projection": base}
    target = np.array([r.meta[q].get("doc_lang", "") for q in r.qids])
    restricted = base.copy()
    restricted[target[:, None] != r.languages[None, :]] = -9
    out["oracle: only the target language's pages searched"] = restricted if (target != "").any() else None
    offsets = neutral.NeutralSpace.from_json(r.stats).offsets()
    zero = np.zeros(r.raw.shape[1], np.float32)
    shifted = r.raw - np.stack([offsets.get(lang, zero) for lang in r.languages])
    out["offset subtracted, not renormalised (within-language order raw)"] = queries @ shifted.T
    by_language = base.copy()
    for lang in set(r.languages):
        cols = r.languages == lang
        part = base[:, cols]
        by_language[:, cols] = (part - part.mean(1, keepdims=True)) / part.std(1, keepdims=True)
    out["scores z-normalised per passage language"] = by_language
    within = np.zeros_like(base, dtype=np.int64)
    for lang in set(r.languages):
        cols = np.where(r.languages == lang)[0]
        within[:, cols] = ranks(base[:, cols])
    out["RRF of the list and its per-language lists (k=5)"] = 1 / (5 + ranks(base)) + 1 / (5 + within)
    neighbours = stored @ stored.T
    np.fill_diagonal(neighbours, -1)
    hub = np.sort(neighbours, axis=1)[:, -10:].mean(1)
    out["hubness: CSLS-style, minus 0.25 x mean cos to 10 nearest passages"] = base - 0.25 * hub[None, :]
    top = np.argsort(-base, axis=1)[:, :3]
    out["pseudo-relevance feedback: q + 0.3 x mean of top 3"] = unit(queries + 0.3 * stored[top].mean(1)) @ stored.T
    for factor in (1.2, 1.5):
        out[f"default-origin offsets x {factor:g}"] = space_with(r, scale_default_offsets(factor))
    known = r.query_languages != neutral.UNKNOWN
    languages = sorted(lang for lang in set(r.languages) if lang != neutral.UNKNOWN)
    for label, langs in (("every language", languages), ("languages with >= 20 chunks", None)):
        chosen = langs or [lang for lang in languages if (r.languages == lang).sum() >= neutral.MIN_CHUNKS]
        basis = inlp_basis(stored, r.languages, chosen, 0.1)
        projected = queries.copy()
        projected[known] = unit(queries[known] - (queries[known] @ basis.T) @ basis)
        out[f"LDA language directions removed too ({label})"] = projected @ unit(stored - (stored @ basis.T) @ basis).T
    pair_q = extra.get("pairs_query")
    for shrink in (1.0, 0.4):
        name = f"ru->en Procrustes from parallel tldr descriptions (shrink {shrink:g}), ru passages and queries"
        if pair_q is None:
            out[name] = None
            continue
        rotation = procrustes(pair_q[0], pair_q[1], shrink)
        passages, mapped = stored.copy(), queries.copy()
        passages[r.languages == "ru"] = unit(stored[r.languages == "ru"] @ rotation.T)
        mapped[r.query_languages == "ru"] = unit(queries[r.query_languages == "ru"] @ rotation.T)
        out[name] = mapped @ passages.T
    name = "8 top directions of ru-en translation differences removed"
    if pair_q is None:
        out[name] = None
    else:
        _, _, vt = np.linalg.svd(pair_q[0] - pair_q[1], full_matrices=False)
        basis = vt[:8]
        out[name] = unit(queries - (queries @ basis.T) @ basis) @ unit(stored - (stored @ basis.T) @ basis).T
    summaries = extra.get(f"summaries:{r.data.name}")
    name = "plus a title + summary list (score sum, weight 0.3)"
    if summaries is None:
        out[name] = None
    else:
        out[name] = base + 0.3 * queries @ summaries.T
    return out


def hybrid_rows(root: Path, every: int) -> list[list[object]]:
    """tldr-mixed vec and hybrid through the engine: today, PRF (a precomputed query vector) and
    the default-origin offsets x 1.5 (the stored vectors and statistics of the synced copy rewritten)."""
    from bench.beir import rank_documents, score_queries
    from bench.bench_mixed_latency import Fixed
    from bench.crosslingual import splits

    loaded = load("tldr-mixed", root)
    assert loaded is not None, f"tldr-mixed not found under {root}"
    data, meta = loaded
    qids = list(data.queries)[::every]
    rows: list[list[object]] = []
    for variant in ("today", "pseudo-relevance feedback", "default-origin offsets x 1.5"):
        with tempfile.TemporaryDirectory(prefix="xl-align-hybrid-") as tmp:
            workdir = Path(tmp)
            by_path = write_workspace(data, workdir / "docs")
            config = load_config(write_config(workdir, workdir / "docs"))
            embedding = config.embedding
            cached = LazyEmbedder(lambda e=embedding: CachingEmbedder(CacheOnly(e)))
            run_sync(config, embedder_factory=cached)
            queries = cached().embed_batch([data.queries[q] for q in qids], is_query=True)
            store = Store.open(config.db)
            try:
                matrix = store.all_vectors()
                ids = [int(i) for i in matrix.ids]
                languages = store.chunk_languages(ids)
                chunk_languages = [languages[i] for i in ids]
                passages = np.array(matrix.matrix)
                if variant.startswith("default-origin"):
                    space = neutral.NeutralSpace.from_json(store.meta().get(neutral.STATS_KEY))
                    raw = space.restore(passages, chunk_languages)
                    scale_default_offsets(1.5)(space)
                    passages = space.neutralise(raw, chunk_languages)
                    with store.transaction():
                        store.rewrite_vectors(ids, passages)
                        store.write_meta({neutral.STATS_KEY: space.to_json()})
                basis = neutral.query_basis(store.meta().get(neutral.STATS_KEY) or "")
            finally:
                store.close()
            vectors = {}
            for i, qid in enumerate(qids):
                vector = queries[i]
                if variant.startswith("pseudo"):
                    known = basis is not None and detect_query_language(data.queries[qid]) != neutral.UNKNOWN
                    searched = neutral.project_query(vector, basis) if known and basis is not None else vector
                    top = np.argsort(-(passages @ searched))[:3]
                    vector = unit(searched + 0.3 * passages[top].mean(0)).astype(np.float32)
                vectors[qid] = vector
            store = Store.open(config.db, readonly=True)
            try:
                for mode in ("vec", "hybrid"):
                    rankings = {
                        q: rank_documents(
                            store,
                            config,
                            data.queries[q],
                            mode,
                            by_path,
                            lambda v=vectors[q], e=embedding: Fixed(e, v),
                        )
                        for q in qids
                    }
                    per_query, _ = score_queries(
                        BeirSet(data.name, data.corpus, {q: data.queries[q] for q in qids}, data.qrels), rankings
                    )
                    groups: dict[str, list[dict[str, float]]] = {}
                    for qid, metrics in per_query.items():
                        for split in splits(meta[qid]):
                            groups.setdefault(split, []).append(metrics)
                    cells: list[object] = [variant, mode]
                    for split, metric in (("cross-cs", "recall@10"), ("same", "ndcg@10"), ("code", "ndcg@10")):
                        cells.append(f"{np.mean([m[metric] for m in groups.get(split, [])]):.3f}")
                    rows.append(cells)
            finally:
                store.close()
    return rows


def czech_default_leave_one_out(r: Replay, root: Path, embedder: Embedder) -> tuple[np.ndarray, np.ndarray]:
    """Scores with the shipped Czech mean recomputed (as bench.neutral_defaults makes it) and,
    for each question, with its own command's Czech page left out of that mean: the shipped
    mean is made of the Czech pages whose English pages are in the benchmark (no other Czech
    page exists), so their descriptions are the cs -> en questions."""
    import hashlib

    from bench.neutral_defaults import PAGES_PER_LANGUAGE, embed_texts
    from bench.tldr_mixed import read_pages

    tldr = root / "corpora" / "tldr-pages"
    in_benchmark = set(r.data.corpus)
    pages = read_pages("cs", tldr)
    names = sorted(
        (n for n in pages if f"cs-{n}" not in in_benchmark), key=lambda n: hashlib.sha256(n.encode("utf-8")).hexdigest()
    )[:PAGES_PER_LANGUAGE]
    by_page: dict[str, list[np.ndarray]] = {}
    for name in names:
        items = embed_texts([pages[name].text])
        vectors = embedder.embed_batch([text for text, _ in items], is_query=False)
        by_page[name] = [v for (_, lang), v in zip(items, vectors, strict=True) if lang == "cs"]
    english_default = neutral.shipped_defaults(MODEL)["en"]

    def with_czech_mean(mean: np.ndarray) -> np.ndarray:
        def edit(space: neutral.NeutralSpace) -> None:
            stats = space.languages["cs"]
            anchored = space.languages["en"].mean + (mean - english_default)  # as neutral.estimate places a default
            space.languages["cs"] = neutral.LanguageStats(anchored.astype(np.float32), stats.chunks, stats.origin)

        return space_with(r, edit)

    full = with_czech_mean(np.mean([v for vs in by_page.values() for v in vs], axis=0))
    left_out = full.copy()
    for name in by_page:
        rows = [i for i, qid in enumerate(r.qids) if f"en-{name}" in r.data.qrels.get(qid, {})]
        if rows:
            rest = [v for other, vs in by_page.items() if other != name for v in vs]
            left_out[rows] = with_czech_mean(np.mean(rest, axis=0))[rows]
    return full, left_out


def summary_texts(r: Replay) -> list[str]:
    """Per chunk: its page's title and `>` summary lines (what a title + description list would embed)."""
    texts = []
    for doc in r.docs:
        text = r.data.corpus[doc][1]
        title = next((line[2:] for line in text.splitlines() if line.startswith("# ")), "")
        summary = " ".join(
            line[1:].strip() for line in text.splitlines() if line.startswith(">") and "http" not in line
        )
        texts.append(f"{title}: {summary}")
    return texts


COLUMNS = (
    ("xquad-mixed-en-ru", "cross", 0, "xquad cross nDCG"),
    ("xquad-mixed-en-ru", "same", 0, "xquad same nDCG"),
    ("tldr-mixed", "cross-cs", 1, "tldr cross-cs R@10"),
    ("tldr-mixed", "cs>en", 1, "cs>en R@10"),
    ("tldr-mixed", "en>cs", 1, "en>cs R@10"),
    ("tldr-mixed", "ru>cs", 1, "ru>cs R@10"),
    ("tldr-mixed", "ru>en", 1, "ru>en R@10"),
    ("tldr-mixed", "same", 0, "tldr same nDCG"),
    ("tldr-mixed", "code", 0, "tldr code nDCG"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=eval_root())
    parser.add_argument("--embed", action="store_true", help="run the local model for vectors the cache lacks")
    parser.add_argument("--hybrid", action="store_true", help="also run the strongest rows through the real engine")
    parser.add_argument("--every", type=int, default=1, help="with --hybrid: every n-th tldr-mixed question only")
    args = parser.parse_args(argv)
    config = EmbeddingConfig()
    embedder = CachingEmbedder(make_embedder(config) if args.embed else CacheOnly(config))
    results: dict[str, dict[str, dict[str, tuple[float, float]] | None]] = {}
    try:
        extra: dict[str, np.ndarray] = {}
        pairs = parallel_descriptions("ru", "en", args.data / "corpora" / "tldr-pages")
        eprint(f"{len(pairs)} ru-en description pairs outside the benchmark")
        try:
            extra["pairs_query"] = np.stack(
                [embedder.embed_batch([p[i] for p in pairs], is_query=True) for i in (1, 2)]
            )
        except EmbedderError as exc:  # a cache miss without --embed: those variants are reported as not run
            eprint(f"parallel pairs not embedded: {exc}")
        for name in ("xquad-mixed-en-ru", "tldr-mixed"):
            with tempfile.TemporaryDirectory(prefix=f"xl-align-{name}-") as tmp:
                r = replay(name, args.data, Path(tmp), embedder)
            if name == "tldr-mixed":
                try:
                    vectors = embedder.embed_batch(summary_texts(r), is_query=False)
                    extra[f"summaries:{name}"] = neutral.NeutralSpace.from_json(r.stats).neutralise(
                        vectors, list(r.languages)
                    )
                except EmbedderError as exc:
                    eprint(f"summaries not embedded: {exc}")
            found = variants(r, extra)
            if name == "tldr-mixed":
                try:
                    full, left_out = czech_default_leave_one_out(r, args.data, embedder)
                    found["Czech default recomputed from its 14 pages (= shipped)"] = full
                    found["same, each question's own command left out of it"] = left_out
                except EmbedderError as exc:
                    eprint(f"Czech default pages not embedded: {exc}")
            for variant, scores in found.items():
                results.setdefault(variant, {})[name] = None if scores is None else r.score(scores)
    finally:
        embedder.close()
    rows = []
    for variant, by_set in results.items():
        cells: list[object] = [variant]
        for set_name, split, metric, _ in COLUMNS:
            scored = by_set.get(set_name)
            value = scored.get(split) if scored else None
            cells.append("n/a" if value is None else f"{value[metric]:.3f}")
        rows.append(cells)
    print(md_table(["variant (vec half)", *(c[3] for c in COLUMNS)], rows))
    if args.hybrid:
        print()
        print(
            md_table(
                ["tldr-mixed, real engine", "mode", "cross-cs R@10", "same nDCG@10", "code nDCG@10"],
                hybrid_rows(args.data, args.every),
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
