"""Crash safety: `kill -9` a real `notes-search sync` at many points; the next run must converge.

Every kill is a real SIGKILL of a real `notes-search --config CFG sync --quiet` subprocess
whose embedder (an OllamaServer, dims 64) lives in this test process, slowed a little so kills
land while vectors are fetched, over a corpus of a few hundred notes so they also land while
chunks are written. Kill points come in two kinds:

* random: delays drawn from a seeded RNG between 0.05 s and the measured duration of a full
  first index (20 for a workspace source, 5 for the first index of a git mirror);
* precise: a small driver (KILL_DRIVER) patches one function or watches the SQL stream and
  SIGKILLs its own process at the n-th call / statement: in the middle of a write transaction,
  between batches, before the lock is released, inside the vector-space switch, ...

After each kill: the lock is free at once, a read-only query works, the index is consistent
(FTS integrity-check, no vector without a chunk, no embedded chunk without a vector) and
every stored vector is the exact vector of its own chunk in the space `meta` names. Then a
re-run completes and the index equals a clean full index of the same content: same files
(minus timestamps), same chunks (`chunk_fingerprint`), same collections, same meta and the
same vector bytes for every chunk.

Helpers used by the other reliability files live here too: the corpus generator and
`TreeGuard` (the user's notes and repositories stay byte-identical).

Rerun: .venv/bin/pytest tests/test_crash_safety.py
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from indexer import neutral
from indexer.config import SAID_ERROR_KEY, load_config
from indexer.embedders import make_embedder
from indexer.lock import SyncLock
from indexer.neutral import NeutralSpace
from indexer.store import Store
from indexer.sync import SyncReport, run_sync
from search.engine import search
from tests.conftest import write_tree
from tests.embed_servers import OllamaServer
from tests.fakes import hash_vector
from tests.gitutil import commit, init_upstream
from tests.store_checks import chunk_fingerprint, embedded_without_vector, fts_integrity_check, orphan_vectors

pytestmark = pytest.mark.sqlite_only(
    "the kill -9 suite of the SQLite file (its WAL, its flock, vec0); PostgreSQL has test_crash_safety_pg.py"
)

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
NOTES_SEARCH = str(Path(sys.executable).with_name("notes-search"))

MODEL = "fake-embed:latest"
MODEL_2 = "fake-embed-2:latest"
DIMS = 64
CORPUS_FILES = 240
GIT_FILES = 100
SERVER_DELAY = 0.02  # seconds per embed request: kills land during embedding too
RANDOM_KILLS = 20
GIT_KILLS = 5
SEED = 20240611


# ------------------------------------------------------------------------------ shared helpers


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every child: this repo importable, no user git config, no proxies."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("NOTES_SEARCH", "GIT_")) and "proxy" not in k.lower()
    }
    env["PYTHONPATH"] = str(REPO)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env.update(extra or {})
    return env


class TreeGuard:
    """Proves that a folder (the user's notes, a user's repository with its .git) was not written
    to: every entry's type, mode, size, sha256 (files), target (symlinks) and mtime."""

    def __init__(self, *roots: Path) -> None:
        self.roots = [Path(r) for r in roots]
        self.before = {str(r): tree_digest(r) for r in self.roots}

    def refresh(self) -> None:
        """After the test itself edited the tree on purpose."""
        self.before = {str(r): tree_digest(r) for r in self.roots}

    def check(self) -> None:
        for root in self.roots:
            after = tree_digest(root)
            before = self.before[str(root)]
            changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
            assert not changed, f"{root} was modified by notes-search: {changed[:10]}"


def tree_digest(root: Path) -> dict[str, tuple[object, ...]]:
    out: dict[str, tuple[object, ...]] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif not stat.S_ISREG(st.st_mode):  # FIFO, socket, device: never opened
                out[rel] = ("special", stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode))
            else:
                with open(path, "rb") as f:
                    digest = hashlib.file_digest(f, "sha256").hexdigest()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns, digest)
    return out


@pytest.fixture
def untouched() -> Iterator[Any]:
    """`guard = untouched(notes, repo)`: at teardown both are byte-identical to that moment."""
    guards: list[TreeGuard] = []

    def make(*roots: Path) -> TreeGuard:
        guard = TreeGuard(*roots)
        guards.append(guard)
        return guard

    yield make
    for guard in guards:
        guard.check()


WORDS = (
    "backup restore server database postgres replica index query latency throughput network "
    "router firewall certificate renewal kernel module driver storage volume snapshot cluster "
    "node deploy rollback release branch merge review ticket sprint budget invoice travel "
    "train flight hotel museum castle river bridge market bread flour starter oven recipe "
    "garden tomato pepper harvest winter summer mountain lake forest trail "
    "záloha obnova síť úložiště výkon uzel nasazení vlak hrad řeka chléb zahrada "
    "сервер резерв сеть поезд река хлеб сад город музей"
).split()
FOLDERS = [
    "devops",
    "devops/db",
    "travel",
    "cooking",
    "projects/alpha",
    "projects/beta",
    "journal/2024",
    "journal/2025",
    "",
]
COLLECTIONS = {"devops": "Servers, backups and databases", "projects/alpha": "Project Alpha planning"}


def _words(rnd: random.Random, n: int) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(n))


def note_text(rnd: random.Random, i: int) -> str:
    """A realistic note: maybe front matter, an H1, sections with paragraphs, code, lists, tables."""
    parts = []
    if rnd.random() < 0.4:
        parts.append(f"---\ntitle: Note {i} {_words(rnd, 2)}\ntags: [{rnd.choice(WORDS)}, t{i % 7}]\n---\n")
    parts.append(f"# Heading {i} {_words(rnd, 3)}\n\n{_words(rnd, rnd.randint(10, 60))} id{i}.\n")
    for s in range(rnd.randint(0, 5)):
        parts.append(f"\n## Section {s} {_words(rnd, 2)}\n")
        for _ in range(rnd.randint(1, 4)):
            parts.append(f"\n{_words(rnd, rnd.randint(20, 140))}.\n")
        kind = rnd.random()
        if kind < 0.15:
            parts.append(f"\n```sh\nrestic backup /srv/{rnd.choice(WORDS)} --tag n{i}\n```\n")
        elif kind < 0.3:
            parts.append("\n" + "".join(f"- [ ] {_words(rnd, 5)}\n" for _ in range(rnd.randint(2, 8))))
        elif kind < 0.4:
            rows = "".join(f"| {rnd.choice(WORDS)} | {rnd.randint(1, 9999)} |\n" for _ in range(4))
            parts.append("\n| key | value |\n|---|---|\n" + rows)
    return "".join(parts)


def corpus_files(n: int, seed: int = SEED) -> dict[str, str]:
    """Deterministic notes: {relative path: text}, including collections and identical copies."""
    rnd = random.Random(seed)
    files = {
        f"{folder}/_meta.yaml": f"name: {folder.replace('/', '-')}\ndescription: {description}\n"
        for folder, description in COLLECTIONS.items()
    }
    for i in range(n):
        folder = rnd.choice(FOLDERS)
        files[f"{folder}/note-{i:04d}.md".lstrip("/")] = note_text(rnd, i)
    for i in range(4):  # boilerplate copies: identical text is embedded once
        files[f"cooking/copy-{i}.md"] = "# Boilerplate\n\nSame text in every copy.\n"
    return files


def write_config(
    home: Path,
    endpoint: str,
    *,
    notes: Path | None = None,
    git_url: Path | None = None,
    model: str = MODEL,
    dims: int = DIMS,
    passage_prefix: str = "",
    name: str = "notes-search.yaml",
    **embedding: Any,
) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    sources: dict[str, Any] = {}
    if notes is not None:
        sources["workspace"] = {"notes": {"root": str(notes), "paths": ["**"]}}
    if git_url is not None:
        sources["git"] = {"repo": {"url": str(git_url), "mirror": str(home / "mirrors" / "repo.git")}}
    data = {
        "root": str(home),
        "embedding": {
            "provider": "ollama",
            "model": model,
            "endpoint": endpoint,
            "dims": dims,
            "batch": 16,
            "passage_prefix": passage_prefix,
            "timeout": 30,
            **embedding,
        },
        "sources": sources,
    }
    path = home / name
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def sync_in_process(config_path: Path, **kwargs: Any) -> SyncReport:
    config = load_config(config_path)
    embedder = make_embedder(config.embedding)
    try:
        return run_sync(config, embedder_factory=lambda: embedder, **kwargs)
    finally:
        embedder.close()


NEUTRAL_KEYS = (neutral.STATS_KEY, neutral.SUMMARY_KEY)


def index_state(db: Path) -> dict[str, Any]:
    """Everything an index holds, id- and timestamp-independent."""
    store = Store.open(db, readonly=True)
    try:
        return {
            "files": [
                {k: v for k, v in dataclasses.asdict(row).items() if k != "updated_at"} for row in store.file_rows()
            ],
            "chunks": chunk_fingerprint(store),
            "collections": store.conn.execute(
                "SELECT source_id, name, folder, description, tags FROM collections ORDER BY 1, 2"
            ).fetchall(),
            "sources": store.conn.execute("SELECT source_id, kind, indexed_rev FROM sources ORDER BY 1").fetchall(),
            # vectors_generation counts committed vector changes: a history, not content; so do
            # the language statistics' chunk counts and means (frozen until a language doubles),
            # but which languages they move is content (none in a one-language corpus)
            # and the errors the `sync` command last said (as a source's last_error above)
            "meta": {
                k: v
                for k, v in store.meta().items()
                if k not in ("vectors_generation", *NEUTRAL_KEYS) and not k.startswith(SAID_ERROR_KEY)
            },
            "languages_moved": sorted(NeutralSpace.from_json(store.meta().get(neutral.STATS_KEY)).offsets()),
        }
    finally:
        store.close()


def index_vectors(db: Path) -> dict[tuple[str, str, int], bytes]:
    store = Store.open(db, readonly=True)
    try:
        keys = {
            cid: (src, path, idx)
            for cid, src, path, idx in store.conn.execute("SELECT id, source_id, path, chunk_idx FROM chunks")
        }
        if not store.has_vector_table():
            return {}
        return {
            keys[rowid]: bytes(blob)
            for rowid, blob in store.conn.execute("SELECT rowid, embedding FROM vec_chunks")
            if rowid in keys
        }
    finally:
        store.close()


def vectors_by_text(db: Path) -> list[tuple[str, bytes]]:
    """(content hash of the embedded text, vector) of every chunk that has a vector."""
    store = Store.open(db, readonly=True)
    try:
        if not store.has_vector_table():
            return []
        hashes = dict(store.conn.execute("SELECT id, content_hash FROM chunks"))
        return [
            (hashes[rowid], bytes(blob))
            for rowid, blob in store.conn.execute("SELECT rowid, embedding FROM vec_chunks")
            if rowid in hashes
        ]
    finally:
        store.close()


def assert_consistent(db: Path) -> dict[str, int]:
    """The invariants that must hold at every instant a crash can leave behind."""
    store = Store.open(db)
    try:
        assert orphan_vectors(store) == [], "vec_chunks rows without a chunk"
        assert embedded_without_vector(store) == [], "chunks marked embedded without a vector"
        fts_integrity_check(store)
        counts = store.counts()
        assert counts["chunks"] == counts["chunks_fts"]
        assert counts["vectors"] == counts["chunks"] - counts["pending"]
        return counts
    finally:
        store.close()


def assert_same_index(db: Path, reference: Path) -> None:
    got, want = index_state(db), index_state(reference)
    for key in want:
        assert got[key] == want[key], f"{key} differs from a clean full index"
    assert index_vectors(db) == index_vectors(reference), "vectors differ from a clean full index"


def schema_ready(db: Path) -> bool:
    if not db.exists():
        return False
    try:
        store = Store.open(db, readonly=True)
    except Exception:  # noqa: BLE001 - a kill before the first migration committed
        return False
    store.close()
    return True


def wait_for_strays(marker: str, timeout: float = 20.0) -> list[int]:
    """Processes (ours: git started by a killed sync, in its own session) whose command line
    names `marker`; waits for them to finish and returns the pids that were seen."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                alive.append(int(entry))
        seen.update(alive)
        if not alive or time.monotonic() > deadline:
            return sorted(seen)
        time.sleep(0.05)


# --------------------------------------------------------------------------- running and killing

# Runs the real CLI after arming one kill point. `call@module:attr@N` SIGKILLs the process on
# the N-th call of module.attr; `sql@TEXT@N` on the N-th SQL statement containing TEXT.
KILL_DRIVER = r"""
import importlib, os, signal, sys
kind, target, nth = sys.argv[1].split("@")
nth, seen = int(nth), 0
def hit():
    global seen
    seen += 1
    if seen == nth:
        os.kill(os.getpid(), signal.SIGKILL)
if kind == "call":
    module, _, attr = target.partition(":")
    owner = importlib.import_module(module)
    *parents, name = attr.split(".")
    for part in parents:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        hit()
        return original(*args, **kwargs)
    setattr(owner, name, wrapper)
else:
    from indexer.store import Store
    opened = Store.__init__
    def init(self, conn, path):
        opened(self, conn, path)
        def trace(cursor, sql, bindings):
            if target in sql:
                hit()
            return True
        conn.exec_trace = trace
    Store.__init__ = init
sys.argv = ["notes-search", *sys.argv[2:]]
from search.cli import main
main()
"""


def sync_command(config_path: Path, *args: str, kill_point: str | None = None) -> list[str]:
    cli_args = ["--config", str(config_path), "sync", "--quiet", *args]
    if kill_point is None:
        return [NOTES_SEARCH, *cli_args]
    return [PYTHON, "-c", KILL_DRIVER, kill_point, *cli_args]


def timed_sync(config_path: Path) -> float:
    """A complete subprocess sync; its wall time is the span random kill points are drawn from."""
    started = time.monotonic()
    proc = subprocess.run(sync_command(config_path), env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return time.monotonic() - started


def kill_after(config_path: Path, delay: float) -> bool:
    """Start a sync, SIGKILL it after `delay` s. True if it was killed (not already finished)."""
    proc = subprocess.Popen(
        sync_command(config_path), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return True
    finally:
        assert proc.stderr is not None
        proc.stderr.close()
    assert proc.returncode == 0
    return False


def kill_at(config_path: Path, kill_point: str) -> None:
    """Run a sync that SIGKILLs itself at `kill_point`; the point must be reached."""
    proc = subprocess.run(
        sync_command(config_path, kill_point=kill_point),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, f"kill point {kill_point} was never reached: {proc.stderr[-2000:]}"


PHASES: Counter[str] = Counter()
LATE_LOCKS: list[list[str]] = []  # kills after which the lock was free only after a moment


def lock_holders(path: Path) -> list[str]:
    """Command lines of the processes with `path` open (the lock's possible holders)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in fds):
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160])
        except OSError:
            continue
    return found


def phase_of(db: Path, expected_files: int) -> str:
    """Where a kill landed, read from what it left behind."""
    if not schema_ready(db):
        return "startup (no schema yet)"
    store = Store.open(db, readonly=True)
    try:
        counts = store.counts()
        meta = store.meta()
    finally:
        store.close()
    if counts["files"] < expected_files or not any(key.startswith("chunker_version") for key in meta):
        return "chunk writing"
    if counts["pending"]:
        return "embedding"
    return "finishing (all written)"


def check_after_kill(config_path: Path, vector_refs: dict[str, dict[str, bytes]]) -> None:
    """What must hold right after a kill, before anything repairs it."""
    config = load_config(config_path)
    lock = SyncLock(config.lock_path)
    if not lock.acquire(timeout=0):
        # A child the killed sync forked (git) keeps a copy of the lock fd until its exec
        # closes it (O_CLOEXEC): held for milliseconds at most, never for good.
        holders = lock_holders(config.lock_path)
        assert lock.acquire(timeout=2.0), f"the killed sync left its lock behind, held by {holders}"
        LATE_LOCKS.append(holders)
    lock.release()
    if not schema_ready(config.db):
        return
    # a read-only query (what an agent runs next) works on the crashed file before any writer
    store = Store.open(config.db, readonly=True)
    try:
        response = search(store, config, "backup server", mode="lex", embedder_factory=lambda: None)  # type: ignore[arg-type,return-value]
        assert response.mode == "lex"
        meta = store.meta()
    finally:
        store.close()
    assert_consistent(config.db)
    # every vector present is its own chunk's vector in the space meta names: never a mix
    model = meta.get("embedding_model")
    if model is None:
        return
    reference = vector_refs[model]
    for digest, blob in vectors_by_text(config.db):
        assert reference.get(digest) == blob, f"a chunk's vector is not the {model} vector of its text"


def rerun_and_compare(config_path: Path, reference_db: Path) -> SyncReport:
    """The next run completes at once (no stale lock) and the index equals a clean one."""
    config = load_config(config_path)
    report = sync_in_process(config_path)
    assert not report.locked, "the lock was still held after the kill"
    assert not report.failed and report.pending == 0, report
    assert_consistent(config.db)
    assert_same_index(config.db, reference_db)
    return report


# ------------------------------------------------------------------------------------ fixtures


class CachingOllamaServer(OllamaServer):
    """The protocol server with a vector cache (the same texts are embedded in every round) and
    truly different spaces per model: MODEL_2's vectors are MODEL's reversed, so a vector of one
    space compared with a query of the other gives a visibly wrong distance."""

    _local = threading.local()

    def route(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Any:
        try:
            self._local.model = json.loads(raw).get("model") if raw else None
        except (ValueError, AttributeError):
            self._local.model = None
        return super().route(method, path, headers, raw)

    def vectors(self, texts: list[str], dims: int) -> list[list[float]]:
        if self.wrong_dims or self.drop_vectors:
            return super().vectors(texts, dims)
        model = getattr(self._local, "model", None)
        return [space_vector(model, text, dims).tolist() for text in texts]


_SPACE_CACHE: dict[tuple[str | None, str, int], np.ndarray] = {}


def space_vector(model: str | None, text: str, dims: int) -> np.ndarray:
    """The vector CachingOllamaServer returns for `text` under `model` (unit length)."""
    key = (model, text, dims)
    vector = _SPACE_CACHE.get(key)
    if vector is None:
        vector = hash_vector(text, dims)
        if model == MODEL_2:
            vector = vector[::-1].copy()
        _SPACE_CACHE[key] = vector
    return vector


@pytest.fixture(scope="module")
def server() -> Iterator[OllamaServer]:
    with CachingOllamaServer({MODEL: DIMS, MODEL_2: DIMS}) as srv:
        srv.delay = SERVER_DELAY
        yield srv


GUARDS: list[TreeGuard] = []  # the user's notes and repository of this module


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("user") / "notes"
    write_tree(root, corpus_files(CORPUS_FILES))  # type: ignore[arg-type]
    GUARDS.append(TreeGuard(root))
    return root


@pytest.fixture(autouse=True)
def user_data_untouched() -> Iterator[None]:
    """Every test that indexes the user's notes or repository leaves them byte-identical."""
    yield
    for guard in GUARDS:
        guard.check()


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory, corpus: Path, server: OllamaServer) -> dict[str, Any]:
    """Clean full indexes: A (corpus, model 1, timed as a subprocess), B (corpus after edits),
    C (corpus under model 2 with another passage prefix: a same-dims space switch)."""
    base = tmp_path_factory.mktemp("ref")
    ref_a = write_config(base / "a", server.url, notes=corpus)
    sync_in_process(ref_a)  # also warms the server's vector cache, as every later round finds it
    duration = timed_sync(write_config(base / "timed", server.url, notes=corpus))
    edited = base / "edited-notes"
    shutil.copytree(corpus, edited, copy_function=shutil.copy2)
    apply_edits(edited)
    ref_b = write_config(base / "b", server.url, notes=edited)
    sync_in_process(ref_b)
    ref_c = write_config(base / "c", server.url, notes=corpus, model=MODEL_2, passage_prefix="doc: ")
    sync_in_process(ref_c)
    db = {name: load_config(path).db for name, path in (("a", ref_a), ("b", ref_b), ("c", ref_c))}
    files = index_state(db["a"])["files"]
    return {
        "duration": duration,
        "db": db,
        "files": len(files),
        "vectors": {
            MODEL: dict(vectors_by_text(db["a"]) + vectors_by_text(db["b"])),
            MODEL_2: dict(vectors_by_text(db["c"])),
        },
    }


def apply_edits(root: Path) -> None:
    """An incremental change set: edits, deletions, renames, a new collection, a file gone binary."""
    notes = sorted(p for p in root.rglob("note-*.md"))
    for path in notes[0:30]:
        path.write_text(
            path.read_text(encoding="utf-8") + "\n## Added later\n\nA new paragraph about replicas.\n", encoding="utf-8"
        )
    for path in notes[30:45]:
        path.unlink()
    for path in notes[45:55]:
        path.rename(path.with_name("moved-" + path.name))
    notes[55].write_bytes(b"\x00\x01binary now")
    rnd = random.Random(SEED + 1)
    gamma = root / "projects" / "gamma"
    gamma.mkdir(parents=True, exist_ok=True)
    (gamma / "_meta.yaml").write_text("name: gamma\ndescription: Project Gamma, added later\n", encoding="utf-8")
    for i in range(20):
        (gamma / f"gamma-{i:02d}.md").write_text(note_text(rnd, 1000 + i), encoding="utf-8")


def copy_index(reference_config: Path, home: Path, endpoint: str, notes: Path, **config: Any) -> Path:
    """A new home whose index starts as a copy of a reference index."""
    config_path = write_config(home, endpoint, notes=notes, **config)
    target = load_config(config_path).db
    target.parent.mkdir(parents=True, exist_ok=True)
    source = load_config(reference_config).db if reference_config.suffix == ".yaml" else reference_config
    for suffix in ("", "-wal"):
        if Path(f"{source}{suffix}").exists():
            shutil.copy2(f"{source}{suffix}", f"{target}{suffix}")
    return config_path


# --------------------------------------------------------------------------- random kill points


def _fractions(count: int, seed: int) -> list[float]:
    rnd = random.Random(seed)
    return [rnd.random() for _ in range(count)]


@pytest.mark.parametrize("fraction", _fractions(RANDOM_KILLS, SEED), ids=lambda f: f"at{f:.3f}T")
def test_random_kill_during_first_index_converges(
    fraction: float, tmp_path: Path, corpus: Path, server: OllamaServer, references: dict[str, Any]
) -> None:
    delay = 0.05 + fraction * (references["duration"] - 0.05)
    config_path = write_config(tmp_path / "home", server.url, notes=corpus)
    killed = kill_after(config_path, delay)
    phase = phase_of(load_config(config_path).db, references["files"]) if killed else "after exit (not killed)"
    PHASES[phase] += 1
    check_after_kill(config_path, references["vectors"])
    rerun_and_compare(config_path, references["db"]["a"])


# -------------------------------------------------------------------------- precise kill points

FIRST_INDEX_POINTS = [
    "sql@COMMIT@1",  # the schema migration itself
    "sql@INSERT INTO chunks(@250",  # deep inside the first batch transaction
    "call@indexer.sync:Syncer._write_batch@2",  # first batch committed, second not started
    "sql@INSERT INTO vec_chunks@20",  # inside a vector transaction
    "call@indexer.store:Store.set_meta@1",  # before chunker_version is recorded
    "call@indexer.lock:SyncLock.release@1",  # done, lock still held when killed
]


@pytest.mark.parametrize("kill_point", FIRST_INDEX_POINTS)
def test_precise_kill_during_first_index_converges(
    kill_point: str, tmp_path: Path, corpus: Path, server: OllamaServer, references: dict[str, Any]
) -> None:
    config_path = write_config(tmp_path / "home", server.url, notes=corpus)
    kill_at(config_path, kill_point)
    PHASES[phase_of(load_config(config_path).db, references["files"])] += 1
    check_after_kill(config_path, references["vectors"])
    rerun_and_compare(config_path, references["db"]["a"])


INCREMENTAL_POINTS = [
    pytest.param("sql@DELETE FROM files@20", id="inside-a-batch-with-deletions"),
    pytest.param("sql@INSERT INTO vec_chunks@3", id="inside-vector-transaction"),
    # regression: collections used to be rewritten only by a run that changed notes, so this
    # kill left the new collection out of the table for good (fixed in a44fd35)
    pytest.param("call@indexer.sync:find_collections@1", id="after-files-before-collections"),
]


@pytest.mark.parametrize("kill_point", INCREMENTAL_POINTS)
def test_precise_kill_during_incremental_sync_converges(
    kill_point: str, tmp_path: Path, corpus: Path, server: OllamaServer, references: dict[str, Any]
) -> None:
    notes = tmp_path / "notes"
    shutil.copytree(corpus, notes, copy_function=shutil.copy2)  # mtimes kept: the copied index is current
    config_path = copy_index(references["db"]["a"], tmp_path / "home", server.url, notes)
    assert not sync_in_process(config_path).changed
    apply_edits(notes)
    kill_at(config_path, kill_point)
    check_after_kill(config_path, references["vectors"])
    rerun_and_compare(config_path, references["db"]["b"])


def _declare_collection_later(tmp_path: Path, server: OllamaServer) -> tuple[Path, Path]:
    """A folder of unchanged notes becomes a collection: only a `_meta.yaml` appears."""
    notes = tmp_path / "notes"
    write_tree(notes, {"ops/a.md": "# A\n\nalpha backup\n", "ops/b.md": "# B\n\nbeta restore\n", "c.md": "# C\n"})
    config_path = write_config(tmp_path / "home", server.url, notes=notes)
    sync_in_process(config_path)
    write_tree(notes, {"ops/_meta.yaml": "name: ops\ndescription: Operations\n"})
    clean = write_config(tmp_path / "clean", server.url, notes=notes)
    sync_in_process(clean)
    return config_path, load_config(clean).db


def test_collection_declared_later_converges_without_full(tmp_path: Path, server: OllamaServer) -> None:
    """Regression (fixed in a44fd35): this used to need `sync --full`."""
    config_path, clean_db = _declare_collection_later(tmp_path, server)
    sync_in_process(config_path)
    assert_same_index(load_config(config_path).db, clean_db)


def test_kill_between_collection_table_and_file_rows_converges(tmp_path: Path, server: OllamaServer) -> None:
    config_path, clean_db = _declare_collection_later(tmp_path, server)
    kill_at(config_path, "call@indexer.store:Store.set_file_collection@1")
    check_after_kill(config_path, {MODEL: dict(vectors_by_text(clean_db))})
    rerun_and_compare(config_path, clean_db)


def test_kill_after_the_changes_before_the_toc_leaves_the_rerun_to_write_it(
    tmp_path: Path, server: OllamaServer
) -> None:
    """The changes are committed, the TOC not yet rewritten: the re-run finds nothing to
    change, and must still bring the TOC in line with the index."""
    from indexer.toc import render_toc, toc_path

    notes = tmp_path / "notes"
    write_tree(notes, {"a.md": "# A\n\nalpha\n", "b.md": "# B\n\nbeta\n"})
    config_path = write_config(tmp_path / "home", server.url, notes=notes)
    sync_in_process(config_path)
    write_tree(notes, {"c.md": "# C\n\ngamma\n"})
    (notes / "a.md").unlink()
    kill_at(config_path, "call@indexer.toc:write_tocs@1")
    [rerun] = sync_in_process(config_path).sources
    assert not rerun.changed  # (only the vector the kill left pending is embedded)
    config = load_config(config_path)
    store = Store.open(config.db, readonly=True)
    try:
        expected = render_toc("notes", store.file_rows("notes"))
    finally:
        store.close()
    assert "c.md" in expected and "a.md" not in expected
    assert toc_path(config, "notes").read_text(encoding="utf-8") == expected


@pytest.mark.parametrize(
    "kill_point",
    [
        "sql@DROP TABLE IF EXISTS vec_chunks@1",  # inside the space switch transaction
        "call@indexer.store:Store.store_vectors@3",  # new space partly filled
    ],
)
def test_precise_kill_during_model_change_never_mixes_spaces(
    kill_point: str, tmp_path: Path, corpus: Path, server: OllamaServer, references: dict[str, Any]
) -> None:
    config_path = copy_index(
        references["db"]["a"], tmp_path / "home", server.url, corpus, model=MODEL_2, passage_prefix="doc: "
    )
    kill_at(config_path, kill_point)
    # check_after_kill compares each vector with the reference of the model meta names
    check_after_kill(config_path, references["vectors"])
    rerun_and_compare(config_path, references["db"]["c"])


# --------------------------------------------------------------------------------- git mirror


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("user-repo") / "notes-repo"
    repo = init_upstream(path)
    files = corpus_files(GIT_FILES, seed=SEED + 2)
    names = sorted(files)
    commit(repo, {n: files[n] for n in names[: len(names) // 2]}, time=1_700_000_000)
    commit(repo, {n: files[n] for n in names[len(names) // 2 :]}, time=1_700_086_400)
    GUARDS.append(TreeGuard(path))
    return path


@pytest.fixture(scope="module")
def git_reference(tmp_path_factory: pytest.TempPathFactory, upstream: Path, server: OllamaServer) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("git-ref")
    config_path = write_config(home / "ref", server.url, git_url=upstream)
    sync_in_process(config_path)  # warms the vector cache
    duration = timed_sync(write_config(home / "timed", server.url, git_url=upstream))
    db = load_config(config_path).db
    return {
        "duration": duration,
        "db": db,
        "files": len(index_state(db)["files"]),
        "vectors": {MODEL: dict(vectors_by_text(db))},
    }


@pytest.mark.parametrize("fraction", _fractions(GIT_KILLS, SEED + 3), ids=lambda f: f"at{f:.3f}T")
def test_random_kill_during_first_mirror_index_converges(
    fraction: float, tmp_path: Path, upstream: Path, server: OllamaServer, git_reference: dict[str, Any]
) -> None:
    home = tmp_path / "home"
    config_path = write_config(home, server.url, git_url=upstream)
    delay = 0.05 + fraction * (git_reference["duration"] - 0.05)
    killed = kill_after(config_path, delay)
    PHASES[
        ("git: " + phase_of(load_config(config_path).db, git_reference["files"])) if killed else "git: after exit"
    ] += 1
    check_after_kill(config_path, git_reference["vectors"])
    rerun_and_compare(config_path, git_reference["db"])
    wait_for_strays(str(home))  # a clone in its own session outlives the killed sync: let it end


@pytest.mark.parametrize(
    "kill_point",
    [
        "call@indexer.sources.git:_run_git@2",  # ls-remote done, clone about to start
        "sql@INSERT INTO chunks(@100",  # mirror cloned, inside the first write transaction
        "call@indexer.store:Store.mark_synced@1",  # every file written, indexed_rev not yet moved
    ],
)
def test_precise_kill_during_first_mirror_index_converges(
    kill_point: str, tmp_path: Path, upstream: Path, server: OllamaServer, git_reference: dict[str, Any]
) -> None:
    home = tmp_path / "home"
    config_path = write_config(home, server.url, git_url=upstream)
    kill_at(config_path, kill_point)
    check_after_kill(config_path, git_reference["vectors"])
    rerun_and_compare(config_path, git_reference["db"])


def test_kill_during_mirror_clone_leaves_no_temporary_clone(
    tmp_path: Path, upstream: Path, server: OllamaServer, git_reference: dict[str, Any]
) -> None:
    home = tmp_path / "home"
    config_path = write_config(home, server.url, git_url=upstream)
    # the clone is complete, the rename not yet done (the first three renames: the config's
    # parsed form into the cache folder, then the integrity check's stamp: the new index checked,
    # then marked as being synced)
    kill_at(config_path, "call@os:replace@4")
    mirrors = home / "mirrors"
    assert [p.name for p in mirrors.iterdir() if p.name.endswith(".clone")], "the kill point missed the clone"
    rerun_and_compare(config_path, git_reference["db"])
    leftovers = sorted(p.name for p in mirrors.iterdir() if p.name != "repo.git")
    assert leftovers == [], f"temporary clones left behind: {leftovers}"


def damage_pack(mirror: Path) -> None:
    """Flip bytes all through the mirror's pack: nothing in it inflates any more."""
    [pack] = (mirror / "objects" / "pack").glob("*.pack")
    pack.chmod(0o644)
    data = bytearray(pack.read_bytes())
    for offset in range(200, len(data) - 100, 50):
        data[offset] ^= 0xFF
    pack.write_bytes(bytes(data))


def without_fetch_head(digest: dict[str, tuple[object, ...]]) -> dict[str, tuple[object, ...]]:
    """A failing fetch rewrites FETCH_HEAD itself; everything else must stay as it was."""
    return {k: v for k, v in digest.items() if k != "FETCH_HEAD"}


@pytest.mark.parametrize(
    "kill_point",
    [
        "call@indexer.sources.git:_carry_hooks@1",  # the new clone is complete, not yet swapped in
        "call@shutil:rmtree@1",  # swapped in, the old mirror not yet removed
    ],
)
def test_kill_during_reclone_of_a_damaged_mirror_converges(
    kill_point: str, tmp_path: Path, upstream: Path, server: OllamaServer, git_reference: dict[str, Any]
) -> None:
    home = tmp_path / "home"
    config_path = write_config(home, server.url, git_url=upstream)
    sync_in_process(config_path)
    mirror = home / "mirrors" / "repo.git"
    damage_pack(mirror)
    damaged = without_fetch_head(tree_digest(mirror))
    proc = subprocess.run(
        sync_command(config_path, "--full", kill_point=kill_point),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, f"kill point {kill_point} was never reached: {proc.stderr[-2000:]}"
    temporary = [p for p in mirror.parent.iterdir() if p.name.endswith(".clone")]
    assert len(temporary) == 1, "the kill point missed the re-clone"
    if kill_point.startswith("call@indexer"):
        assert without_fetch_head(tree_digest(mirror)) == damaged, (
            "the old mirror was replaced before the new one was complete"
        )
    else:
        assert without_fetch_head(tree_digest(temporary[0])) == damaged, "the swapped-out folder is not the old mirror"
    check_after_kill(config_path, git_reference["vectors"])
    sync_in_process(config_path, full=True)  # meets the damage again (or not) and cleans up
    assert sorted(p.name for p in mirror.parent.iterdir()) == ["repo.git"], "temporary folders left behind"
    rerun_and_compare(config_path, git_reference["db"])
    wait_for_strays(str(home))


# ------------------------------------------------------------------------------------- summary


def test_kill_point_summary(references: dict[str, Any], git_reference: dict[str, Any]) -> None:
    """Where the kills landed (printed with -s; recorded in RELIABILITY.md)."""
    summary = {
        "first index duration s": round(references["duration"], 2),
        "mirror first index duration s": round(git_reference["duration"], 2),
        "phases": dict(sorted(PHASES.items())),
        "lock free only after a moment (holders)": LATE_LOCKS,
    }
    print("\nkill points:", json.dumps(summary, ensure_ascii=False, indent=1))
