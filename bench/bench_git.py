"""Git source sync speed: one changed file vs a full re-index, and the cron no-op tick.

    .venv/bin/python -m bench.bench_git [--files 5000] [--commits 30] [--repeat 5] [--quick] [--no-machine]

Builds a local upstream of N markdown files with history (pygit2, no working tree), indexes it
through the real sync into a temporary SQLite file with the deterministic FakeEmbedder in process
(embedding time is measured and reported apart: it depends on the model, not on us), then times:

- a sync after one file changed upstream (ls-remote, fetch, tree diff, chunk, write, embed);
- a full re-index of the same head (`sync --full`: every file re-read and re-chunked);
- a no-op tick as a whole `notes-search --config CFG sync --quiet` process (what cron runs).

Targets (the issue): one changed file <= 1 s excluding embedding and >= 20x cheaper than the full
re-index; no-op process <= 0.3 s. Prints a markdown table; exit status 1 if a target is missed.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fakes, when run as a script

from bench.report import arg_parser, report
from bench.workspaces import TimedEmbedder
from indexer.config import load_config
from indexer.store import Store
from indexer.sync import SyncReport, run_sync
from tests.gitutil import commit, init_upstream

T0 = 1_600_000_000
EMBEDDING = {"provider": "ollama", "model": "fake:1", "endpoint": "http://127.0.0.1:9", "dims": 64}
WORDS = (
    "backup restic borg server nginx proxy wireguard tunnel postgres replica disk smart cron timer "
    "docker compose sourdough starter flour water kvas borsch pelmeni train kazan kremlin bouldering "
    "film developer lego motor sensor bathroom tiles budget invoice"
).split()


def note(rng: random.Random, number: int, version: int) -> bytes:
    """A note of a few hundred words under H1/H2/H3 headings (2-4 chunks)."""

    def para(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n)) + "."

    parts = [f"---\ntitle: Note {number}\ntags: [bench, t{number % 17}]\n---\n# Note {number}\n\n{para(40)}\n"]
    for section in range(rng.randint(2, 4)):
        parts.append(f"\n## Section {section} (v{version})\n\n{para(60)}\n\n{para(50)}\n")
        if rng.random() < 0.3:
            parts.append(
                f"\n### Detail {section}\n\n- {para(8)}\n- {para(8)}\n\n```sh\nrestic snapshots --host h{number}\n```\n"
            )
    return "".join(parts).encode()


class Upstream:
    """A repository built commit by commit (tests.gitutil: explicit times, no working tree)."""

    def __init__(self, path: Path) -> None:
        self.repo = init_upstream(path)
        self.path = path
        self.time = T0

    def commit(self, changes: dict[str, bytes]) -> str:
        self.time += 3600
        return commit(self.repo, changes, time=self.time)  # type: ignore[arg-type]


def build(root: Path, files: int, commits: int, rng: random.Random) -> tuple[Upstream, list[str]]:
    upstream = Upstream(root / "upstream")
    paths = [f"area-{i % 40:02d}/topic-{i % 7}/note-{i:05d}.md" for i in range(files)]
    upstream.commit({p: note(rng, i, 0) for i, p in enumerate(paths)})
    for version in range(1, commits):
        touched = rng.sample(range(files), k=min(files, 50))
        upstream.commit({paths[i]: note(rng, i, version) for i in touched})
    return upstream, paths


def timed_sync(config_path: Path, embedder: TimedEmbedder, **kwargs: object) -> tuple[float, float, SyncReport]:
    """(wall seconds, embedding seconds, report) of one in-process sync."""
    embedder.seconds = 0.0
    started = time.perf_counter()
    report = run_sync(load_config(config_path), embedder_factory=lambda: embedder, **kwargs)  # type: ignore[arg-type]
    wall = time.perf_counter() - started
    if report.failed:
        raise SystemExit(f"sync failed: {report.failed[0].error}")
    return wall, embedder.seconds, report


def measure(files: int, commits: int, repeat: int) -> tuple[str, bool]:
    """Markdown table of the git sync figures, and whether every target was met."""
    exe = Path(sys.executable).with_name("notes-search")
    rng = random.Random(42)

    with tempfile.TemporaryDirectory(prefix="bench-git-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        upstream, paths = build(root, files, commits, rng)
        built = time.perf_counter() - started
        config_path = root / "notes-search.yaml"
        config_path.write_text(
            yaml.safe_dump(
                {
                    "root": str(root),
                    "embedding": EMBEDDING,
                    "sources": {"git": {"notes": {"url": str(upstream.path)}}},
                }
            )
        )
        config = load_config(config_path)
        embedder = TimedEmbedder(config.embedding)

        first = timed_sync(config_path, embedder)
        store = Store.open(config.db, readonly=True)
        counts = store.counts()
        store.close()

        one_file = []
        for run in range(repeat):
            i = rng.randrange(files)
            upstream.commit({paths[i]: note(rng, i, 1000 + run)})
            wall, embed, report = timed_sync(config_path, embedder)
            assert report.sources[0].updated == 1, report
            one_file.append((wall, embed))

        full = timed_sync(config_path, embedder, full=True)

        noop_in_process = [timed_sync(config_path, embedder)[0] for _ in range(repeat)]
        noop_process = []
        for _ in range(repeat):
            started = time.perf_counter()
            subprocess.run([str(exe), "--config", str(config_path), "sync", "--quiet"], check=True)
            noop_process.append(time.perf_counter() - started)

    def median(pairs: list[tuple[float, float]]) -> tuple[float, float]:
        return statistics.median(w for w, _ in pairs), statistics.median(e for _, e in pairs)

    one_wall, one_embed = median(one_file)
    one_ex = one_wall - one_embed
    full_ex = full[0] - full[1]
    ratio = full_ex / one_ex
    noop = statistics.median(noop_process)
    rows = [
        ("first index (clone + every file)", first[0], first[1], "", None),
        ("sync after 1 changed file (median)", one_wall, one_embed, "<= 1 s excl. embedding", one_ex <= 1.0),
        ("full re-index of the same head (`--full`)", full[0], full[1], "", None),
        ("  ratio full / 1 file (excl. embedding)", None, None, ">= 20x", ratio >= 20),
        ("no-op tick, in process (median)", statistics.median(noop_in_process), 0.0, "", None),
        ("no-op tick, `notes-search sync --quiet` process (median)", noop, 0.0, "<= 0.3 s", noop <= 0.3),
    ]
    lines = [
        f"{files} markdown files, {commits} commits of history (built in {built:.1f} s); "
        f"index: {counts['files']} files, {counts['chunks']} chunks; FakeEmbedder in process\n",
        "| measurement | wall s | embedding s | excl. embedding s | target | ok |",
        "|---|---:|---:|---:|---|---|",
    ]
    for name, wall, embed, target, ok in rows:
        if wall is None:
            lines.append(f"| {name} | | | {ratio:.0f}x | {target} | {'yes' if ok else 'NO'} |")
            continue
        mark = "" if ok is None else ("yes" if ok else "NO")
        lines.append(f"| {name} | {wall:.3f} | {embed:.3f} | {wall - embed:.3f} | {target} | {mark} |")
    return "\n".join(lines), all(ok is not False for *_, ok in rows)


QUICK = {"files": 3000, "commits": 10, "repeat": 3}  # the 20x ratio needs a few thousand files
FULL = {"files": 5000, "commits": 30, "repeat": 5}


def run(quick: bool, with_machine: bool, sizes: dict[str, int] | None = None) -> str:
    """The run_all convention; `sizes` overrides QUICK / FULL."""
    table = lambda quick: measure(**(sizes or (QUICK if quick else FULL)))[0]  # noqa: E731
    return report("Git source sync", "git", (("sync", table),), quick, with_machine)


def main() -> int:
    parser = arg_parser(__doc__, f"defaults {QUICK} instead of {FULL}")
    parser.add_argument("--files", type=int)
    parser.add_argument("--commits", type=int, help="history depth (each later commit edits 50 files)")
    parser.add_argument("--repeat", type=int, help="runs of the one-file and no-op measurements (median)")
    args = parser.parse_args()
    sizes = dict(QUICK if args.quick else FULL)
    sizes.update({k: v for k, v in (("files", args.files), ("commits", args.commits), ("repeat", args.repeat)) if v})
    markdown = run(args.quick, not args.no_machine, sizes)
    print(markdown)
    return 1 if "| NO |" in markdown else 0


if __name__ == "__main__":
    sys.exit(main())
