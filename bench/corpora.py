"""Real markdown at scale: index public corpora through the normal `sync` and say where the time goes.

    .venv/bin/python -m bench.corpora [--corpus tldr-pages] [--quick] [--json]

Each corpus folder (read-only, under `../shared/eval/corpora/` next to the repository) becomes
one workspace source of a fresh index in a temporary folder, synced by `run_sync` with the
local model. The run is timed in phases from the outside (nothing of the product is wrapped):

- files: the sync's files stage, from its start until its progress callback reports the embed
  stage (walking, stat, reading and hashing files, parse+chunk, the write transactions);
- parse+chunk: `indexer.chunker.parse_markdown` over every file, timed apart after the sync
  (the share of the files stage that is ours rather than SQLite's or the file system's);
- embed: the model calls, timed by the caching embedder the sync is given (vectors come from
  the cache in `bench/beir.py` when present; the cache remembers what each vector cost when it
  was computed, reported as "uncached");
- other: the rest of the wall time (the embed stage's vector writes, statistics, TOC).

Then a second `sync` over the unchanged folder is timed (the cron case), and the index size on
disk is split by table with SQLite's `dbstat`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python bench/corpora.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.beir import (
    EVAL_ROOT,
    LOCAL_EMBEDDING,
    CachingEmbedder,
    EmbedderFactory,
    cached_local_factory,
    embed_progress,
    write_config,
)
from bench.report import eprint, header, machine_table, md_table
from indexer import chunker
from indexer.config import load_config
from indexer.store import Store
from indexer.sync import run_sync

CORPORA = ("tldr-pages", "linux-spellbook-cs")
SOURCE_ID = "corpus"


@dataclass
class CorpusRun:
    corpus: str
    files: int
    skipped: int
    chunks: int
    source_bytes: int
    total_s: float
    files_s: float  # the sync's files stage: walk, read, hash, parse+chunk, write
    parse_s: float  # parse+chunk of every file, timed apart
    embed_s: float  # model time in this run (0 when every vector came from the cache)
    embed_uncached_s: float  # what embedding every chunk cost when it was computed
    other_s: float
    noop_sync_s: float
    db_bytes: int
    by_table: dict[str, int]  # bytes on disk per table group

    @property
    def full_index_s(self) -> float:
        """The wall time of a first index without the cache: measured phases + uncached embedding."""
        return self.total_s - self.embed_s + self.embed_uncached_s


class StageClock:
    """A sync `progress` callback that notes when each stage first reports, passing every call on."""

    def __init__(self, inner: Callable[[str, int, int], None]) -> None:
        self.inner = inner
        self.first: dict[str, float] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        self.first.setdefault(stage, time.perf_counter())
        self.inner(stage, done, total)


def parse_seconds(corpus: Path) -> float:
    """parse+chunk of every markdown file of the corpus, the call a sync makes per file."""
    total = 0.0
    for path in sorted(corpus.rglob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")
        started = time.perf_counter()
        chunker.parse_markdown(text, path.relative_to(corpus).as_posix())
        total += time.perf_counter() - started
    return total


TABLE_GROUPS = (  # first matching name prefix wins
    ("chunks_fts", "FTS5"),
    ("vec_chunks", "vec0"),
    ("chunk_vectors", "vector copy"),
    ("chunks", "chunks"),
    ("files", "files"),
    ("idx_", "indexes"),
    ("sqlite_autoindex_", "indexes"),
)


def size_by_table(db: Path) -> dict[str, int]:
    """Bytes per table group, from dbstat (every page of the file is attributed to one object)."""
    store = Store.open(db, readonly=True)
    try:
        rows = store.conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    finally:
        store.close()
    out: dict[str, int] = {}
    for name, size in rows:
        group = next((label for prefix, label in TABLE_GROUPS if name.startswith(prefix)), "other")
        out[group] = out.get(group, 0) + int(size)
    return dict(sorted(out.items(), key=lambda item: -item[1]))


def index_corpus(
    corpus: Path,
    workdir: Path,
    *,
    embedding_yaml: str = LOCAL_EMBEDDING,
    embedder_factory: EmbedderFactory | None = None,
    log: Callable[[str], None] = print,
) -> CorpusRun:
    """Index `corpus` from scratch in `workdir`, timed by phase; the embedder must be a
    CachingEmbedder (its model time and cached costs are the embed phase)."""
    config = load_config(write_config(workdir, corpus, embedding_yaml, SOURCE_ID))
    get_embedder = (embedder_factory or cached_local_factory())(config)
    log(f"{corpus.name}: syncing")
    clock = StageClock(embed_progress(corpus.name, log))
    started = time.perf_counter()
    report = run_sync(config, embedder_factory=get_embedder, progress=clock)
    ended = time.perf_counter()
    total, files_s = ended - started, clock.first.get("embed", ended) - started
    if report.pending:
        raise RuntimeError(f"{corpus.name}: {report.pending} chunks left without vectors: {report.embed_notice}")
    embedder = get_embedder()
    if not isinstance(embedder, CachingEmbedder):
        raise TypeError("index_corpus needs a CachingEmbedder to time the embed phase")
    embed_s, uncached_s = embedder.model_seconds, embedder.model_seconds + embedder.cached_cost
    started = time.perf_counter()
    noop = run_sync(config, embedder_factory=get_embedder)
    noop_s = time.perf_counter() - started
    if noop.changed:
        raise RuntimeError(f"{corpus.name}: the second sync changed the index")
    embedder.close()
    store = Store.open(config.db, readonly=True)
    try:
        counts = store.counts()
    finally:
        store.close()
    source = report.sources[0]
    db_bytes = sum(p.stat().st_size for p in config.db.parent.glob(config.db.name + "*"))
    return CorpusRun(
        corpus=corpus.name,
        files=source.added,
        skipped=source.skipped,
        chunks=counts["chunks"],
        source_bytes=sum(p.stat().st_size for p in corpus.rglob("*.md")),
        total_s=total,
        files_s=files_s,
        parse_s=parse_seconds(corpus),
        embed_s=embed_s,
        embed_uncached_s=uncached_s,
        other_s=total - files_s - embed_s,
        noop_sync_s=noop_s,
        db_bytes=db_bytes,
        by_table=size_by_table(config.db),
    )


def mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def report_tables(runs: Sequence[CorpusRun]) -> str:
    timing = md_table(
        [
            "corpus",
            "files",
            "chunks",
            "source MiB",
            "files stage s",
            "of it parse+chunk s",
            "embed s (uncached)",
            "chunks/s embed",
            "other s",
            "full index s",
            "no-op sync ms",
        ],
        [
            [
                r.corpus,
                r.files,
                r.chunks,
                mib(r.source_bytes),
                f"{r.files_s:.1f}",
                f"{r.parse_s:.1f}",
                f"{r.embed_uncached_s:.0f}",
                f"{r.chunks / r.embed_uncached_s:.1f}" if r.embed_uncached_s else "-",
                f"{r.other_s:.1f}",
                f"{r.full_index_s:.0f}",
                f"{r.noop_sync_s * 1000:.0f}",
            ]
            for r in runs
        ],
    )
    groups = sorted({g for r in runs for g in r.by_table}, key=lambda g: -max(r.by_table.get(g, 0) for r in runs))
    size = md_table(
        ["corpus", "index MiB", *[f"{g} MiB" for g in groups]],
        [[r.corpus, mib(r.db_bytes), *[mib(r.by_table.get(g, 0)) for g in groups]] for r in runs],
    )
    return f"{timing}\n\n{size}"


QUICK_CORPORA = ("linux-spellbook-cs",)


def run_corpora(
    names: Sequence[str] = CORPORA, *, data_root: Path = EVAL_ROOT / "corpora", cache: Path | None = None
) -> list[CorpusRun]:
    """Every available corpus, each indexed from scratch in its own temporary folder."""
    runs: list[CorpusRun] = []
    for name in names:
        folder = data_root / name
        if not folder.is_dir():
            eprint(f"skipped {name}: no corpus at {folder}")
            continue
        with tempfile.TemporaryDirectory(prefix=f"corpus-{name}-") as tmp:
            runs.append(index_corpus(folder, Path(tmp), embedder_factory=cached_local_factory(cache), log=eprint))
    return runs


def report(runs: Sequence[CorpusRun], quick: bool, with_machine: bool) -> str:
    parts = [header("Real markdown at scale (bench/corpora.py)", quick).rstrip()]
    if with_machine:
        parts.append(machine_table())
    parts.append(report_tables(runs) if runs else "skipped: none of the corpora is present (see the log)")
    return "\n\n".join(parts) + "\n"


def run(quick: bool, with_machine: bool) -> str:
    """The run_all convention; quick indexes only the small Czech corpus."""
    return report(run_corpora(QUICK_CORPORA if quick else CORPORA), quick, with_machine)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="append", choices=CORPORA, help="repeatable; default: all")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_CORPORA)}")
    parser.add_argument("--no-machine", action="store_true", help="leave out the machine table")
    parser.add_argument("--data", type=Path, default=EVAL_ROOT / "corpora")
    parser.add_argument("--cache", type=Path, help="vector cache file (default: under the XDG cache)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    names = args.corpus or (QUICK_CORPORA if args.quick else CORPORA)
    runs = run_corpora(names, data_root=args.data, cache=args.cache)
    if args.json:
        print(json.dumps([asdict(r) | {"full_index_s": r.full_index_s} for r in runs], indent=2))
    else:
        print(report(runs, args.quick, not args.no_machine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
