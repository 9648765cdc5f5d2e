"""Cross-lingual retrieval through the real pipeline: a question in one language, the page in another.

    .venv/bin/python -m bench.crosslingual [--set xquad-mixed-en-ru|tldr-mixed]... [--quick] [--json]

Two sets, each scored per mode (lex, vec, hybrid) and split by query kind:

- `xquad-mixed-en-ru` (`../shared/eval/xquad-mixed-en-ru`): 240 XQuAD paragraphs, each present
  in ONE language (half English, half Russian), every question in both languages; a query is
  `same` when it is in its paragraph's language, else `cross`.
- `tldr-mixed` (bench/tldr_mixed.py): tldr pages in English, Czech and Russian, each command in
  one language; questions are the other languages' example descriptions without the command
  name (`cross`), the page's own (`same`), and bare command lines (`code`, language-less).
  The `cross-cs` split is every cross-lingual query whose question or page is Czech.

Indexing and vector caching are bench/beir.py's (`run_beir`), so a rerun embeds nothing new.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # `python bench/crosslingual.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.beir import BeirRun, BeirSet, cached_local_factory, load_set, read_jsonl, run_beir
from bench.machine import eval_root
from bench.report import eprint, header, machine_table, md_table
from bench.tldr_mixed import build_with_meta
from search.evaluate import mean

SETS = ("xquad-mixed-en-ru", "tldr-mixed")
METRICS = ("ndcg@10", "recall@10", "mrr@10")
QUICK_QUERIES = 300


def load_xquad_mixed(root: Path) -> tuple[BeirSet, dict[str, dict[str, str]]] | None:
    folder = root / "xquad-mixed-en-ru"
    if not (folder / "corpus.jsonl").exists():
        return None
    data = load_set(folder)
    meta: dict[str, dict[str, str]] = {}
    for q in read_jsonl(folder / "queries.jsonl"):
        info = q.get("metadata") or {}
        qid = str(q["_id"])
        if qid in data.queries and isinstance(info, dict):
            meta[qid] = {"lang": str(info.get("lang")), "kind": "cross" if info.get("cross_lingual") else "same"}
    return data, meta


def load(name: str, root: Path) -> tuple[BeirSet, dict[str, dict[str, str]]] | None:
    if name == "xquad-mixed-en-ru":
        return load_xquad_mixed(root)
    tldr = root / "corpora" / "tldr-pages"
    return build_with_meta(tldr) if (tldr / "pages.cs").is_dir() else None


def splits(meta: dict[str, str]) -> list[str]:
    """The report rows a query counts in."""
    names = [meta["kind"]]
    if meta["kind"] == "cross" and "cs" in (meta.get("lang"), meta.get("doc_lang")):
        names.append("cross-cs")
    return names


def split_scores(run: BeirRun, meta: dict[str, dict[str, str]]) -> dict[str, dict[str, dict[str, float]]]:
    """mode -> split -> metric -> mean, plus the query count under "queries"."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for mode, per_query in run.per_query.items():
        groups: dict[str, list[dict[str, float]]] = {}
        for qid, metrics in per_query.items():
            for name in splits(meta[qid]):
                groups.setdefault(name, []).append(metrics)
        out[mode] = {
            name: {**{m: mean([q[m] for q in rows]) for m in METRICS}, "queries": float(len(rows))}
            for name, rows in sorted(groups.items())
        }
    return out


def run_sets(
    names: Sequence[str] = SETS,
    *,
    data_root: Path | None = None,
    query_limit: int | None = None,
    cache: Path | None = None,
    log=eprint,
) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    results = {}
    data_root = data_root or eval_root()  # a worktree one level deeper finds ../shared/eval too
    for name in names:
        loaded = load(name, data_root)
        if loaded is None:
            log(f"skipped {name}: no data under {data_root}")
            continue
        data, meta = loaded
        if query_limit:  # every n-th query: the splits keep their proportions
            step = max(1, len(data.queries) // query_limit)
            data = BeirSet(data.name, data.corpus, dict(list(data.queries.items())[::step]), data.qrels)
        with tempfile.TemporaryDirectory(prefix=f"xl-{name}-") as tmp:
            run = run_beir(data, Path(tmp), embedder_factory=cached_local_factory(cache), log=log)
        results[name] = split_scores(run, meta)
    return results


def results_table(results: dict[str, dict[str, dict[str, dict[str, float]]]]) -> str:
    rows = []
    for name, modes in results.items():
        for mode, groups in modes.items():
            for split, scores in groups.items():
                rows.append([name, split, mode, *(f"{scores[m]:.4f}" for m in METRICS), int(scores["queries"])])
    return md_table(["set", "split", "mode", "nDCG@10", "recall@10", "MRR@10", "queries"], rows)


def report(results: dict[str, dict[str, dict[str, dict[str, float]]]], quick: bool, with_machine: bool) -> str:
    parts = [header("Cross-lingual retrieval (bench/crosslingual.py)", quick).rstrip()]
    if with_machine:
        parts.append(machine_table())
    if quick:
        parts.append(f"_quick: about {QUICK_QUERIES} queries per set_")
    parts.append(results_table(results) if results else "skipped: no cross-lingual set is present")
    return "\n\n".join(parts) + "\n"


def run(quick: bool, with_machine: bool) -> str:
    """The run_all convention: every set, markdown out."""
    return report(run_sets(query_limit=QUICK_QUERIES if quick else None), quick, with_machine)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", choices=SETS, help="repeatable; default: both")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-machine", action="store_true", help="leave out the machine table")
    parser.add_argument("--data", type=Path, default=eval_root(), help="folder holding the eval sets")
    parser.add_argument("--cache", type=Path, help="vector cache file (default: under the XDG cache)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = run_sets(
        args.set or SETS, data_root=args.data, query_limit=QUICK_QUERIES if args.quick else None, cache=args.cache
    )
    print(json.dumps(results, indent=2) if args.json else report(results, args.quick, not args.no_machine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
