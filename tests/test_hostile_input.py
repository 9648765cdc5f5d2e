"""Hostile and broken input: each case ends in one clear line or a skipped file with a log line,
and the rest of the index stays correct. Plus the security guards available now.

* config: malformed YAML, wrong types, unknown keys, hostile YAML (CliRunner: exit 1, one line
  naming the file and the key);
* git: missing / corrupt / foreign mirror, unreachable remote, force-pushed remote;
* files: a 200 MB note (skipped by max_file_bytes; peak RSS of the sync measured), binary and
  invalid UTF-8 `.md`, NUL bytes, 10,000-level nested lists and quotes, deep headings, CRLF + BOM,
  hostile file names (spaces, unicode NFD, newline, tab, quotes, 255 bytes), symlink loops and
  symlinks leaving the source, FIFOs, a file deleted between scan and read;
* embedding server: HTTP 500, timeouts, truncated JSON, wrong dimensions, fewer vectors than
  inputs, model not installed, nothing listening (sync keeps chunks pending with a warning;
  hybrid queries degrade to lexical and say so; `--mode vec` fails with one line);
* security: `query --path` and `show` cannot read outside the configured sources; no shell=True
  or os.system in the code base; the user's notes and repositories stay byte-identical
  (`untouched`, from tests.test_crash_safety).

Rerun: .venv/bin/pytest tests/test_hostile_input.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pygit2
import pytest
import yaml
from click.testing import CliRunner, Result

from indexer.config import load_config
from indexer.embedders import make_embedder
from indexer.sources import workspace
from indexer.store import Store
from indexer.sync import run_sync
from search import cli as cli_module
from tests.conftest import NOTES, assert_one_line_error, write_tree
from tests.embed_servers import OllamaServer, closed_port_url
from tests.gitutil import commit, init_upstream
from tests.store_checks import chunk_fingerprint
from tests.test_crash_safety import (  # noqa: F401 - `untouched` is a fixture
    MODEL,
    assert_consistent,
    index_state,
    subprocess_env,
    sync_in_process,
    untouched,
    write_config,
)

pytestmark = pytest.mark.sqlite_only(
    "it reads the SQLite file it configures (index_state, good_rows); on PostgreSQL, NUL text is covered by"
    " test_write_files and test_collections"
)

REPO = Path(__file__).resolve().parent.parent
GOOD = {rel: textwrap.dedent(text).lstrip("\n") for rel, text in NOTES.items()}
SECRET = "TOPSECRET-7f3a9c"
PYTHON = sys.executable
PEAK_RSS_DRIVER = """
import atexit, sys
def report(path=sys.argv[1]):
    with open("/proc/self/status") as status, open(path, "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM")))
atexit.register(report)
sys.argv = ["notes-search", *sys.argv[2:]]
from search.cli import main
main()
"""  # written outside every source; must never be printed or indexed


# ------------------------------------------------------------------------------------- helpers


@pytest.fixture
def server() -> Iterator[OllamaServer]:
    with OllamaServer({MODEL: 64}) as srv:
        yield srv


def cli(config: Path | None, *args: str) -> Result:
    prefix = ["--config", str(config)] if config is not None else []
    return CliRunner().invoke(cli_module.cli, [*prefix, *args])


def good_rows(db: Path, paths: set[str] | None = None) -> list[tuple[object, ...]]:
    """Chunk fingerprint rows of the well-formed notes only."""
    paths = paths or set(GOOD)
    store = Store.open(db, readonly=True)
    try:
        return [row for row in chunk_fingerprint(store) if row[1] in paths]
    finally:
        store.close()


@pytest.fixture
def clean_good(tmp_path_factory: pytest.TempPathFactory, server: OllamaServer) -> list[tuple[object, ...]]:
    """The good notes indexed alone: what the rest of a hostile index must still hold."""
    base = tmp_path_factory.mktemp("clean")
    write_tree(base / "notes", GOOD)  # type: ignore[arg-type]
    config_path = write_config(base / "home", server.url, notes=base / "notes")
    sync_in_process(config_path)
    return good_rows(load_config(config_path).db)


def log_text(config_path: Path) -> str:
    log = load_config(config_path).log
    return log.read_text(encoding="utf-8") if log.exists() else ""


def query_json(config_path: Path, text: str, *args: str) -> dict[str, Any]:
    result = cli(config_path, "query", text, "--json", *args)
    data = json.loads(result.stdout)
    assert result.exit_code == (0 if data["results"] else 1), result.output  # as grep: 1 when nothing matched
    return data


# ------------------------------------------------------------------------------------- config

BAD_CONFIGS: list[tuple[str, str, str]] = [
    # (id, yaml, text the one-line error must contain besides the file name)
    ("yaml-syntax", "root: [unclosed\n", "line"),
    ("yaml-tab-indent", "embedding:\n\tdims: 3\n", "invalid YAML"),
    ("yaml-python-tag", "root: !!python/object/apply:os.system ['echo pwned']\n", "invalid YAML"),
    ("yaml-undefined-alias", "root: *nowhere\n", "invalid YAML"),
    ("yaml-raw-nul", "root: a\x00b\n", "invalid YAML"),
    ("top-level-list", "- root\n- db\n", "expected a mapping"),
    ("top-level-scalar", "just text\n", "expected a mapping"),
    ("unknown-top-key", "colour: blue\n", "colour"),
    ("non-string-key", "1: x\n", "keys must be strings"),
    ("root-not-string", "root: 5\n", "root"),
    ("root-mapping", "root: {a: 1}\n", "root"),
    ("db-list", "db: []\n", "db"),
    ("max-file-bytes-text", "max_file_bytes: big\n", "max_file_bytes"),
    ("max-file-bytes-float", "max_file_bytes: 1e3\n", "max_file_bytes"),
    ("max-file-bytes-zero", "max_file_bytes: 0\n", "max_file_bytes"),
    ("max-file-bytes-huge", "max_file_bytes: 99999999999999999999999\n", "max_file_bytes"),
    ("duplicate-db", "db: a.sqlite\ndb: b.sqlite\n", "db: duplicate key (lines 1 and 2)"),
    (
        "ollama-no-tag",
        "embedding: {provider: ollama, model: nomic-embed-text, endpoint: 'http://x', dims: 3}\n",
        "name:tag",
    ),
    (
        "dims-too-big",
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: 100000}\n",
        "embedding.dims",
    ),
    (
        "timeout-nan",
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: 3, timeout: .nan}\n",
        "embedding.timeout",
    ),
    ("embedding-scalar", "embedding: fast\n", "embedding"),
    ("embedding-unknown-key", "embedding: {temperature: 1}\n", "embedding.temperature"),
    ("provider-unknown", "embedding: {provider: magic}\n", "embedding.provider"),
    ("ollama-no-model", "embedding: {provider: ollama, endpoint: 'http://x', dims: 3}\n", "embedding.model"),
    ("ollama-no-dims", "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x'}\n", "embedding.dims"),
    ("dims-text", "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: abc}\n", "embedding.dims"),
    (
        "dims-negative",
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: -5}\n",
        "embedding.dims",
    ),
    ("dims-bool", "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: true}\n", "embedding.dims"),
    (
        "dims-huge-float",
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: 1e400}\n",
        "embedding.dims",
    ),
    (
        "batch-zero",
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: 3, batch: 0}\n",
        "embedding.batch",
    ),
    (
        "endpoint-ftp",
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'ftp://x', dims: 3}\n",
        "embedding.endpoint",
    ),
    ("endpoint-list", "embedding: {provider: ollama, model: 'm:1', endpoint: [a], dims: 3}\n", "embedding.endpoint"),
    (
        "keep-alive-list",
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: 3, keep_alive: [1]}\n",
        "embedding.keep_alive",
    ),
    (
        "timeout-negative",
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: 3, timeout: -1}\n",
        "embedding.timeout",
    ),
    (
        "retries-negative",
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: 3, retries: -1}\n",
        "embedding.retries",
    ),
    (
        "prefix-number",
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: 3, query_prefix: 5}\n",
        "embedding.query_prefix",
    ),
    ("local-wrong-dims", "embedding: {dims: 100}\n", "embedding.dims"),
    ("local-other-model", "embedding: {model: bge-m3}\n", "embedding.model"),
    ("sources-list", "sources: [a, b]\n", "sources"),
    ("sources-unknown-group", "sources: {svn: {}}\n", "sources.svn"),
    ("git-no-url", "sources: {git: {r: {mirror: m.git}}}\n", "sources.git.r.url"),
    ("git-url-number", "sources: {git: {r: {url: 5}}}\n", "sources.git.r.url"),
    ("git-unknown-key", "sources: {git: {r: {url: u, depth: 1}}}\n", "sources.git.r.depth"),
    ("git-branch-list", "sources: {git: {r: {url: u, branch: [main]}}}\n", "sources.git.r.branch"),
    ("workspace-no-paths", "sources: {workspace: {w: {root: n}}}\n", "sources.workspace.w.paths"),
    ("workspace-paths-number", "sources: {workspace: {w: {root: n, paths: 5}}}\n", "sources.workspace.w.paths"),
    (
        "workspace-absolute-glob",
        "sources: {workspace: {w: {root: n, paths: ['/etc/**']}}}\n",
        "sources.workspace.w.paths",
    ),
    ("workspace-dotdot-glob", "sources: {workspace: {w: {root: n, paths: ['../**']}}}\n", "sources.workspace.w.paths"),
    (
        "workspace-empty-include",
        "sources: {workspace: {w: {root: n, paths: ['**'], include: ['']}}}\n",
        "sources.workspace.w.include",
    ),
    ("workspace-spec-list", "sources: {workspace: {w: [a]}}\n", "sources.workspace.w"),
    ("source-id-colon", "sources: {workspace: {'a:b': {root: n, paths: ['**']}}}\n", "sources.workspace.a:b"),
    ("source-id-slash", "sources: {git: {'a/b': {url: u}}}\n", "sources.git.a/b"),
    ("duplicate-id", "sources: {git: {x: {url: u}}, nanobot: {x: {root: n, paths: ['**']}}}\n", "already used"),
    (
        "billion-laughs",
        "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
        "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
        "a",
    ),
]


@pytest.mark.parametrize("text, needle", [pytest.param(t, n, id=i) for i, t, n in BAD_CONFIGS])
def test_bad_config_is_one_line_naming_file_and_key(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad config.yaml"
    path.write_text(text, encoding="utf-8")
    started = time.monotonic()
    for command in (["status"], ["sync"], ["query", "x"]):
        assert_one_line_error(cli(path, *command), str(path), needle)
    assert time.monotonic() - started < 10


NUL_VALUES = [
    ("root", 'root: "a\\0b"\n'),
    ("log", 'log: "a\\0b"\n'),
    ("sources.workspace.w.root", 'sources: {workspace: {w: {root: "n\\0b", paths: ["**"]}}}\n'),
    ("sources.git.r.url", 'sources: {git: {r: {url: "a\\0b"}}}\n'),
]


@pytest.mark.parametrize("key, text", NUL_VALUES, ids=[k for k, _ in NUL_VALUES])
def test_nul_in_a_config_path_is_one_line(tmp_path: Path, key: str, text: str) -> None:
    path = tmp_path / "nul.yaml"
    path.write_text(
        'embedding: {provider: ollama, model: "m:1", endpoint: "http://127.0.0.1:9", dims: 4, retries: 0}\n' + text,
        encoding="utf-8",
    )
    (tmp_path / "n").mkdir()
    assert_one_line_error(cli(path, "sync"), str(path), key)


def test_deeply_nested_yaml_config_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("root: " + "[" * 10_000 + "]" * 10_000 + "\n", encoding="utf-8")
    assert_one_line_error(cli(path, "status"), str(path), "YAML")


def test_config_file_problems_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    assert_one_line_error(cli(missing, "status"), str(missing), "not found")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("root: Příliš\n".encode("cp1250"))
    assert_one_line_error(cli(latin, "status"), str(latin))
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    assert_one_line_error(cli(folder, "status"), str(folder))


def test_unusable_db_and_log_paths_are_one_line(tmp_path: Path, server: OllamaServer) -> None:
    notes = tmp_path / "notes"
    write_tree(notes, GOOD)  # type: ignore[arg-type]
    config_path = write_config(tmp_path / "home", server.url, notes=notes)
    data = yaml.safe_load(config_path.read_text())
    data["db"] = str(notes)  # a folder, not a database file
    config_path.write_text(yaml.safe_dump(data))
    assert_one_line_error(cli(config_path, "sync"), "index")
    data["db"] = str(tmp_path / "db.sqlite")
    (tmp_path / "db.sqlite").write_bytes(b"this is not a database" * 100)
    config_path.write_text(yaml.safe_dump(data))
    assert_one_line_error(cli(config_path, "sync"), "db.sqlite")
    assert_one_line_error(cli(config_path, "query", "x"), "db.sqlite")
    data["db"] = str(tmp_path / "ok.sqlite")
    data["log"] = str(notes)  # a folder: the log cannot be written
    config_path.write_text(yaml.safe_dump(data))
    assert_one_line_error(cli(config_path, "sync"), "log")


# ------------------------------------------------------------------------------------ git sources


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, pygit2.Repository]:
    path = tmp_path / "user-repo"
    repo = init_upstream(path)
    commit(
        repo,
        {
            "a.md": "# Alpha\n\nalpha backup notes\n",
            "b.md": "# Beta\n\nbeta restore\n",
            "deep/c.md": "# Gamma\n\ngamma kernel\n",
        },
        time=1_700_000_000,
    )
    return path, repo


def git_setup(tmp_path: Path, server: OllamaServer, url: Path | str, name: str = "home") -> tuple[Path, Path]:
    notes = tmp_path / f"{name}-notes"
    write_tree(notes, GOOD)  # type: ignore[arg-type]
    home = tmp_path / name
    config_path = write_config(home, server.url, notes=notes, git_url=url)  # type: ignore[arg-type]
    return config_path, home / "mirrors" / "repo.git"


def clean_git_state(tmp_path: Path, server: OllamaServer, url: Path, name: str) -> dict[str, Any]:
    config_path, _ = git_setup(tmp_path, server, url, name)
    result = cli(config_path, "sync", "--quiet")
    assert result.exit_code == 0, result.output
    return index_state(load_config(config_path).db)


def same_as_clean(config_path: Path, clean: dict[str, Any]) -> None:
    got = index_state(load_config(config_path).db)
    for key in ("files", "chunks", "sources", "meta"):
        assert got[key] == clean[key], key


@pytest.mark.parametrize("damage", ["deleted", "garbage-head", "objects-gone", "empty-folder"])
def test_missing_or_corrupt_mirror_is_recloned(
    tmp_path: Path, server: OllamaServer, upstream: tuple[Path, pygit2.Repository], damage: str, untouched: Any
) -> None:
    url, _ = upstream
    untouched(url)
    config_path, mirror = git_setup(tmp_path, server, url)
    assert cli(config_path, "sync", "--quiet").exit_code == 0
    if damage == "deleted":
        shutil.rmtree(mirror)
    elif damage == "garbage-head":
        (mirror / "HEAD").write_bytes(b"\x00garbage\xff")
    elif damage == "objects-gone":
        shutil.rmtree(mirror / "objects")
        (mirror / "objects").mkdir()
    else:
        shutil.rmtree(mirror)
        mirror.mkdir()
    result = cli(config_path, "sync", "--full", "--quiet")
    assert result.exit_code == 0, result.output
    assert_consistent(load_config(config_path).db)
    same_as_clean(config_path, clean_git_state(tmp_path, server, url, "clean"))


def test_foreign_folder_at_mirror_path_is_refused_and_kept(
    tmp_path: Path, server: OllamaServer, upstream: tuple[Path, pygit2.Repository], clean_good: Any, untouched: Any
) -> None:
    url, _ = upstream
    config_path, mirror = git_setup(tmp_path, server, url)
    write_tree(mirror, {"my-thesis.md": "# Do not delete me\n"})
    untouched(url, mirror)
    result = cli(config_path, "sync")
    assert result.exit_code == 1
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: git source 'repo' (") and "refusing" in errors[0], errors
    assert good_rows(load_config(config_path).db) == clean_good  # the workspace source was indexed anyway


@pytest.mark.parametrize("bad_url", ["missing-local", "closed-port-http", "not-a-repo"])
def test_unreachable_remote_keeps_the_last_index(
    tmp_path: Path,
    server: OllamaServer,
    upstream: tuple[Path, pygit2.Repository],
    bad_url: str,
    clean_good: Any,
    untouched: Any,
) -> None:
    url, _ = upstream
    untouched(url)
    config_path, _ = git_setup(tmp_path, server, url)
    assert cli(config_path, "sync", "--quiet").exit_code == 0
    before = index_state(load_config(config_path).db)
    target = {
        "missing-local": str(tmp_path / "gone.git"),
        "closed-port-http": closed_port_url() + "/notes.git",
        "not-a-repo": str(tmp_path),
    }[bad_url]
    data = yaml.safe_load(config_path.read_text())
    data["sources"]["git"]["repo"]["url"] = target
    config_path.write_text(yaml.safe_dump(data))
    started = time.monotonic()
    result = cli(config_path, "sync")
    assert time.monotonic() - started < 30
    assert result.exit_code == 1
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: git source 'repo' ("), errors
    after = index_state(load_config(config_path).db)
    assert after["files"] == before["files"] and after["chunks"] == before["chunks"], (
        "an outage must not empty the index"
    )
    assert good_rows(load_config(config_path).db) == clean_good
    status = json.loads(cli(config_path, "status", "--json").stdout)
    assert any(s["id"] == "repo" and s["error"] for s in status["sources"])
    assert query_json(config_path, "gamma kernel", "--mode", "lex")["results"], "the last index stays searchable"


def test_force_pushed_remote_converges(
    tmp_path: Path, server: OllamaServer, upstream: tuple[Path, pygit2.Repository], untouched: Any
) -> None:
    url, repo = upstream
    first = str(repo.references["refs/heads/main"].target)
    commit(
        repo, {"b.md": "# Beta\n\nbeta restore, second take\n", "e.md": "# Epsilon\n\nepsilon\n"}, time=1_700_100_000
    )
    config_path, _ = git_setup(tmp_path, server, url)
    assert cli(config_path, "sync", "--quiet").exit_code == 0
    # rewrite history: drop the second commit, change and delete files on a new branch tip
    commit(
        repo,
        {"a.md": "# Alpha rewritten\n\nrewritten history\n", "deep/c.md": None, "f.md": "# Phi\n\nphi\n"},
        time=1_700_200_000,
        parents=[first],
    )
    untouched(url)
    result = cli(config_path, "sync", "--quiet")
    assert result.exit_code == 0, result.output
    assert_consistent(load_config(config_path).db)
    same_as_clean(config_path, clean_git_state(tmp_path, server, url, "clean"))
    paths = {row["path"] for row in index_state(load_config(config_path).db)["files"] if row["source_id"] == "repo"}
    assert paths == {"a.md", "b.md", "f.md"}


def test_large_and_binary_blobs_in_git_are_skipped_with_a_log_line(
    tmp_path: Path, server: OllamaServer, upstream: tuple[Path, pygit2.Repository], untouched: Any
) -> None:
    url, repo = upstream
    commit(
        repo,
        {
            "big.md": b"# Big\n" + b"x" * 6_000_000,
            "bin.md": b"\x89PNG\r\n\x00\x00",
            "latin.md": "Příliš".encode("cp1250"),
        },
        time=1_700_300_000,
    )
    untouched(url)
    config_path, _ = git_setup(tmp_path, server, url)
    result = cli(config_path, "sync", "--quiet")
    assert result.exit_code == 0, result.output
    paths = {row["path"] for row in index_state(load_config(config_path).db)["files"] if row["source_id"] == "repo"}
    assert paths == {"a.md", "b.md", "deep/c.md"}
    log = log_text(config_path)
    for name in ("big.md", "bin.md", "latin.md"):
        assert re.search(rf"{name}.*(too large|binary|UTF-8)|(too large|binary|UTF-8).*{name}", log), (
            f"no log line for {name}"
        )


# ------------------------------------------------------------------------------------- workspace


@pytest.fixture
def ws(tmp_path: Path, server: OllamaServer, untouched: Any) -> dict[str, Any]:
    """A workspace with the good notes, a secret outside it, and a config (db and log outside)."""
    notes = tmp_path / "notes"
    write_tree(notes, GOOD)  # type: ignore[arg-type]
    outside = tmp_path / "outside"
    write_tree(outside, {"secret.md": f"# Secret\n\n{SECRET}\n", "sub/also.md": f"{SECRET} again\n"})
    config_path = write_config(tmp_path / "home", server.url, notes=notes, retries=0, timeout=10)
    # the test's own edits are followed by guard.refresh(); notes-search itself never writes here
    return {"notes": notes, "outside": outside, "config": config_path, "guard": untouched(notes, outside)}


def sync_ok(config_path: Path, *args: str) -> Result:
    result = cli(config_path, "sync", *args)
    assert result.exit_code == 0, result.output
    return result


def indexed_paths(config_path: Path) -> set[str]:
    return {row["path"] for row in index_state(load_config(config_path).db)["files"]}


def test_200mb_note_is_skipped_without_reading_it(ws: dict[str, Any], clean_good: Any) -> None:
    big = ws["notes"] / "huge.md"
    line = b"# huge\n" + b"a line of a huge note about backups and servers 0123456789\n" * 17_000
    block = line * 1  # ~1 MiB
    with open(big, "wb") as f:
        for _ in range(200 * 2**20 // len(block) + 1):
            f.write(block)
    assert big.stat().st_size >= 200 * 2**20
    before = big.stat()
    # VmHWM of the sync's own address space (ru_maxrss would include the pre-exec copy of pytest)
    peak_file = ws["notes"].parent / "peak.txt"
    proc = subprocess.run(
        [PYTHON, "-c", PEAK_RSS_DRIVER, str(peak_file), "--config", str(ws["config"]), "sync", "--quiet"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    peak_mb = int(peak_file.read_text().split()[1]) / 1024
    print(f"\npeak RSS of a sync next to a 200 MB note: {peak_mb:.0f} MB")
    assert peak_mb < 150, f"the sync read the big file into memory (peak {peak_mb:.0f} MB)"
    assert "huge.md" not in indexed_paths(ws["config"])
    assert re.search(r"huge\.md: skipped: too large", log_text(ws["config"])), "no log line for the skipped file"
    assert good_rows(load_config(ws["config"]).db) == clean_good
    after = big.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    big.unlink()  # the guard's snapshot (taken before the file existed) holds again


HOSTILE_FILES: dict[str, bytes] = {
    "binary.md": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 10,
    "latin1.md": "# Zálohy\n\nPříliš žluťoučký kůň\n".encode("cp1250"),
    "utf16.md": "# UTF-16 note\n".encode("utf-16"),
    "nul-early.md": b"# Nul\n\nbefore\x00after\n",
    "nul-late.md": b"# Late nul\n\n" + b"padding words " * 1000 + b"\n\nlatenulmarker\x00tail\n",
    "empty.md": b"",
    "blank.md": b"\n\n   \n\t\n",
    "nested-list.md": ("# Nested list\n\n" + "- " * 10_000 + "deepestlistitem\n").encode(),
    "nested-indent.md": ("# Indented list\n\n" + "".join("  " * i + f"- level{i}\n" for i in range(1_000))).encode(),
    "nested-quote.md": ("# Nested quote\n\n" + "> " * 10_000 + "deepestquote\n").encode(),
    "nested-brackets.md": ("# Brackets\n\n" + "[" * 10_000 + "bracketword" + "]" * 10_000 + "\n").encode(),
    "headings.md": "".join(f"{'#' * (1 + i % 9)} heading{i}\n\nbody {i}\n\n" for i in range(3_000)).encode(),
    "crlf-bom.md": "\ufeff---\r\ntitle: Windows note\r\ntags: [win]\r\n---\r\n# Windows\r\n\r\nline three\r\n\r\ncrlfmarker here\r\n".encode(),
    "long-line.md": ("# Long line\n\n" + "longlineword " * 300_000 + "\n").encode(),
    "front-matter-bomb.md": (
        b"---\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        b"tags: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\ntitle: *d\n---\n# Bomb\n\nbombbody\n"
    ),
    "front-matter-python.md": b"---\ntitle: !!python/object/apply:os.system ['touch /tmp/pwned']\n---\n# Py\n\npybody\n",
    "front-matter-deep.md": ("---\ntitle: " + "[" * 5_000 + "]" * 5_000 + "\n---\n# Deep FM\n\ndeepfmbody\n").encode(),
    "control-chars.md": "# Ctl\n\nbell\x07 esc\x1b[31m red\x1b[0m del\x7f ls\u2028ps\u2029 rlo\u202e txt\n".encode(),
    "surrogate-escape.md": b"# Bad\n\n\xed\xa0\x80 lone surrogate bytes\n",
}
NAMES: dict[str, bytes] = {
    "with space.md": b"# Space\n\nspacemarker\n",
    "u\u0308ber/nfd-na\u0301zev.md": b"# NFD\n\nnfdmarker\n",
    "new\nline.md": b"# Newline name\n\nnewlinemarker\n",
    "tab\tname.md": b"# Tab\n\ntabmarker\n",
    "-dash.md": b"# Dash\n\ndashmarker\n",
    "quote'\"`$(echo).md": b"# Quote\n\nquotemarker\n",
    "%s%n%x.md": b"# Format\n\nformatmarker\n",
    ("n" * 250) + ".md": b"# Long name\n\nlongnamemarker\n",
    "emoji-\U0001f4a9.md": b"# Emoji\n\nemojimarker\n",
}
INDEXED_HOSTILE = {
    "nul-late.md",
    "nested-list.md",
    "nested-indent.md",
    "nested-quote.md",
    "nested-brackets.md",
    "headings.md",
    "crlf-bom.md",
    "long-line.md",
    "front-matter-bomb.md",
    "front-matter-python.md",
    "front-matter-deep.md",
    "control-chars.md",
    "empty.md",
    "blank.md",
}
SKIPPED_HOSTILE = {"binary.md", "latin1.md", "utf16.md", "nul-early.md", "surrogate-escape.md"}


def test_hostile_files_are_indexed_or_skipped_with_a_log_line(ws: dict[str, Any], clean_good: Any) -> None:
    write_tree(ws["notes"], {f"hostile/{k}": v for k, v in HOSTILE_FILES.items()})
    ws["guard"].refresh()
    started = time.monotonic()
    sync_ok(ws["config"], "--quiet")
    elapsed = time.monotonic() - started
    assert elapsed < 60, f"hostile files took {elapsed:.1f} s"
    paths = indexed_paths(ws["config"])
    assert {p.removeprefix("hostile/") for p in paths if p.startswith("hostile/")} == INDEXED_HOSTILE
    log = log_text(ws["config"])
    for name in SKIPPED_HOSTILE:
        assert re.search(rf"hostile/{re.escape(name)}: skipped: (binary|too large|not UTF-8)", log), (
            f"no log line for {name}"
        )
    assert_consistent(load_config(ws["config"]).db)
    assert good_rows(load_config(ws["config"]).db) == clean_good
    for marker in (
        "deepestlistitem",
        "deepestquote",
        "bracketword",
        "crlfmarker",
        "heading2999",
        "bombbody",
        "pybody",
        "deepfmbody",
        "longlineword",
        "latenulmarker",
    ):
        data = query_json(ws["config"], marker, "--mode", "lex", "-k", "3")
        assert data["results"], f"{marker} not found"
    assert not Path("/tmp/pwned").exists()
    # CRLF + BOM: front matter read, line numbers as grep counts them
    hit = query_json(ws["config"], "crlfmarker", "--mode", "lex")["results"][0]
    assert hit["path"] == "hostile/crlf-bom.md" and hit["breadcrumb"].startswith("Windows note")
    lines = (ws["notes"] / "hostile/crlf-bom.md").read_bytes().split(b"\n")
    assert any(b"crlfmarker" in line for line in lines[hit["line"] - 1 : hit["end_line"]])
    # a second sync changes nothing: the hostile files do not flap
    db = load_config(ws["config"]).db
    before = db.stat().st_mtime_ns, index_state(db)
    sync_ok(ws["config"], "--quiet")
    assert index_state(db) == before[1]


def test_hostile_file_names(ws: dict[str, Any], clean_good: Any) -> None:
    write_tree(ws["notes"], {f"names/{k}": v for k, v in NAMES.items()})
    ws["guard"].refresh()
    sync_ok(ws["config"], "--quiet")
    paths = indexed_paths(ws["config"])
    import unicodedata

    expected = {unicodedata.normalize("NFC", f"names/{k}") for k in NAMES}
    assert expected <= paths, expected - paths
    for name, content in NAMES.items():
        marker = content.decode().split("\n")[2]
        data = query_json(ws["config"], marker, "--mode", "lex", "-k", "1")
        assert data["results"] and data["results"][0]["path"] == unicodedata.normalize("NFC", f"names/{name}"), marker
        shown = cli(ws["config"], "show", f"notes:{data['results'][0]['path']}")
        assert shown.exit_code == 0 and marker in shown.stdout, (name, shown.output)
    assert good_rows(load_config(ws["config"]).db) == clean_good


def test_show_opens_a_result_whose_name_is_nfd_on_disk(ws: dict[str, Any]) -> None:
    write_tree(ws["notes"], {"u\u0308ber/na\u0301zev.md": "# NFD\n\nnfdmarker\n"})
    ws["guard"].refresh()
    sync_ok(ws["config"], "--quiet")
    hit = query_json(ws["config"], "nfdmarker", "--mode", "lex")["results"][0]
    assert hit["path"] == "\u00fcber/n\u00e1zev.md"  # NFC in the index
    shown = cli(ws["config"], "show", f"notes:{hit['path']}:{hit['line']}")
    assert shown.exit_code == 0 and "nfdmarker" in shown.stdout, shown.output


def test_symlinks_loops_and_escapes(ws: dict[str, Any], clean_good: Any) -> None:
    notes, outside = ws["notes"], ws["outside"]
    (notes / "loops").mkdir()
    os.symlink(".", notes / "loops" / "self")
    os.symlink("..", notes / "loops" / "parent")
    os.symlink(notes / "loops" / "b", notes / "loops" / "a")
    os.symlink(notes / "loops" / "a", notes / "loops" / "b")  # a <-> b: ELOOP
    os.symlink(outside / "secret.md", notes / "leak.md")
    os.symlink(outside / "sub", notes / "leakdir")
    os.symlink("../outside/secret.md", notes / "relative-leak.md")
    os.symlink("/dev/zero", notes / "zero.md")
    os.mkfifo(notes / "pipe.md")
    os.symlink("devops/postgres.md", notes / "inside-link.md")  # stays inside: fine to index
    ws["guard"].refresh()
    started = time.monotonic()
    sync_ok(ws["config"], "--quiet")
    assert time.monotonic() - started < 30, "a loop or a FIFO stalled the walk"
    paths = indexed_paths(ws["config"])
    assert not {"leak.md", "relative-leak.md", "zero.md", "pipe.md"} & paths
    assert not any(p.startswith(("leakdir/", "loops/")) for p in paths), paths
    assert query_json(ws["config"], SECRET, "--mode", "lex")["results"] == []
    log = log_text(ws["config"])
    assert "leakdir/: skipped: symlink to a folder outside" in log, log  # said, as a file's is
    assert "leak.md: skipped: symlink whose target is outside" in log
    status = json.loads(cli(ws["config"], "status", "--offline", "--json").stdout)
    left_out = {f["path"] for s in status["sources"] for f in s["not_indexed"]["files"]}
    assert {"leakdir/", "leak.md"} <= left_out, left_out
    assert good_rows(load_config(ws["config"]).db) == clean_good


def test_file_deleted_between_scan_and_read(ws: dict[str, Any]) -> None:
    notes, config_path = ws["notes"], ws["config"]
    sync_ok(config_path, "--quiet")
    write_tree(notes, {"new/one.md": "# One\n\nfresh one\n", "new/two.md": "# Two\n\nfresh two\n"})
    for rel in GOOD:  # every known file changes, so every one is read again
        (notes / rel).write_text(GOOD[rel] + "\nedited\n", encoding="utf-8")
    ws["guard"].refresh()
    config = load_config(config_path)
    listed = [item.rel for item in workspace.list_files(config.sources["notes"])]  # type: ignore[arg-type]
    first, victims = listed[0], listed[1::2]
    assert victims
    deleted: list[str] = []

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "files" and not deleted:
            for rel in victims:
                (notes / rel).unlink()
                deleted.append(rel)

    embedder = make_embedder(config.embedding)
    report = run_sync(config, embedder_factory=lambda: embedder, progress=progress)
    ws["guard"].refresh()
    assert deleted and not report.failed, report
    paths = indexed_paths(config_path)
    assert first in paths and not set(victims) & paths
    assert_consistent(config.db)
    sync_ok(config_path, "--quiet")  # and the next run agrees
    assert indexed_paths(config_path) == {rel for rel in listed if rel not in victims}


# --------------------------------------------------------------------------- embedding server faults

FAULTS = {
    "http-500": {"fail_next": 10_000},
    "timeout": {"delay": 2.0},
    "truncated-json": {"truncate": True},
    "wrong-dims": {"wrong_dims": 32},
    "fewer-vectors": {"drop_vectors": 1},
}


def set_knobs(server: OllamaServer, knobs: dict[str, Any]) -> None:
    for name, value in knobs.items():
        setattr(server, name, value)


@pytest.mark.parametrize("fault", list(FAULTS))
def test_embedding_server_faults_leave_chunks_pending_then_heal(
    fault: str, ws: dict[str, Any], server: OllamaServer, tmp_path: Path
) -> None:
    config_path = ws["config"]
    data = yaml.safe_load(config_path.read_text())
    data["embedding"]["timeout"] = 0.5
    config_path.write_text(yaml.safe_dump(data))
    set_knobs(server, FAULTS[fault])
    result = sync_ok(config_path)
    warnings = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and warnings[0].startswith("warning:") and "without vectors" in warnings[0], warnings
    counts = assert_consistent(load_config(config_path).db)
    assert counts["chunks"] > 0 and counts["pending"] == counts["chunks"] and counts["vectors"] == 0
    assert "without vectors" in log_text(config_path)
    # queries: hybrid degrades to keywords and says so; vec fails with one line
    data = query_json(config_path, "záloha databáze")
    assert data["degraded"] is True and data["notice"] and data["results"]
    assert data["results"][0]["path"] == "devops/zalohovani.md"
    assert_one_line_error(cli(config_path, "query", "záloha", "--mode", "vec"), "embedd")
    # healed: the next tick inside the outage's back-off leaves the embedder alone, a retry now
    # fills every vector and equals a clean index
    set_knobs(server, {"fail_next": 0, "delay": 0.0, "truncate": False, "wrong_dims": None, "drop_vectors": 0})
    sync_ok(config_path)
    assert assert_consistent(load_config(config_path).db)["pending"] == counts["chunks"]
    result = sync_ok(config_path, "--retry-embedder")
    assert result.stderr.strip() == ""
    counts = assert_consistent(load_config(config_path).db)
    assert counts["pending"] == 0
    clean = write_config(tmp_path / "clean", server.url, notes=ws["notes"])
    sync_in_process(clean)
    assert index_state(load_config(config_path).db)["chunks"] == index_state(load_config(clean).db)["chunks"]
    assert query_json(config_path, "záloha databáze")["degraded"] is False


def test_embedding_server_down_or_model_missing(ws: dict[str, Any], server: OllamaServer) -> None:
    config_path = ws["config"]
    data = yaml.safe_load(config_path.read_text())
    for endpoint, model, needle in ((closed_port_url(), MODEL, "unreachable"), (server.url, "nope:1", "not found")):
        data["embedding"].update(endpoint=endpoint, model=model)
        config_path.write_text(yaml.safe_dump(data))
        result = sync_ok(config_path)
        warning = result.stderr.strip()
        assert "\n" not in warning and warning.startswith("warning:") and needle in warning, warning
        assert assert_consistent(load_config(config_path).db)["vectors"] == 0
        assert query_json(config_path, "5432")["degraded"] is True
        assert_one_line_error(cli(config_path, "query", "5432", "--mode", "vec"), needle)


def test_transient_500_is_retried(ws: dict[str, Any], server: OllamaServer) -> None:
    data = yaml.safe_load(ws["config"].read_text())
    data["embedding"]["retries"] = 1
    ws["config"].write_text(yaml.safe_dump(data))
    server.fail_next = 1
    result = sync_ok(ws["config"])
    assert result.stderr.strip() == ""
    assert assert_consistent(load_config(ws["config"]).db)["pending"] == 0


# ------------------------------------------------------------------------------------- security


@pytest.mark.parametrize(
    "path", ["../..", "..", "../outside", "notes:../outside", "devops/../../outside", "./../x", "/etc", "notes:/etc"]
)
def test_query_path_cannot_leave_the_sources(ws: dict[str, Any], path: str) -> None:
    sync_ok(ws["config"], "--quiet")
    result = cli(ws["config"], "query", SECRET, "--path", path, "--mode", "lex")
    assert SECRET not in result.stdout
    assert_one_line_error(result, "--path")


@pytest.mark.parametrize(
    "ref",
    [
        "../outside/secret.md",
        "notes:../outside/secret.md",
        "/etc/passwd",
        str(Path("/") / "tmp"),
        "notes:/etc/passwd",
        "notes:devops/../../outside/secret.md",
        "leak.md",
        "notes:leak.md",
        "notes:leakdir/also.md",
        "C:\\Windows\\win.ini",
        "notes:..\\outside\\secret.md",
        "notes:secret.txt",
        "notes:.git/config",
        "notes:devops/zalohovani.md\x00.txt",
    ],
)
def test_show_cannot_read_outside_the_sources(ws: dict[str, Any], ref: str) -> None:
    notes, outside = ws["notes"], ws["outside"]
    os.symlink(outside / "secret.md", notes / "leak.md")
    os.symlink(outside / "sub", notes / "leakdir")
    (notes / "secret.txt").write_text(SECRET)  # inside the root but outside the scope (include *.md)
    (notes / ".git").mkdir()
    (notes / ".git" / "config").write_text(f"[remote]\n\turl = https://user:{SECRET}@example.com/\n")
    ws["guard"].refresh()
    sync_ok(ws["config"], "--quiet")
    result = cli(ws["config"], "show", ref)
    assert SECRET not in result.output and "root:x:0:0" not in result.output
    assert_one_line_error(result)


def test_show_and_grep_read_inside_the_sources(ws: dict[str, Any]) -> None:
    """The confinement must not refuse the legitimate cases."""
    sync_ok(ws["config"], "--quiet")
    shown = cli(ws["config"], "show", "notes:devops/postgres.md:3")
    assert shown.exit_code == 0 and "5432" in shown.stdout
    found = cli(ws["config"], "grep", SECRET, "--json")
    assert found.exit_code == 1 and json.loads(found.stdout)["results"] == []  # no match: exit 1, as grep


MCP_ESCAPES = [
    "../outside/secret.md",
    "notes:../outside/secret.md",
    "/etc/passwd",
    "leak.md",
    "notes:leakdir",
    "notes:leakdir/also.md",
    "notes:devops/../../outside",
    "..",
    "notes:..\\outside",
]


@pytest.mark.parametrize("path", MCP_ESCAPES)
def test_mcp_tool_paths_cannot_leave_the_sources(ws: dict[str, Any], path: str) -> None:
    """Every MCP tool that takes a path (search, status, reindex, get, grep) refuses escapes."""
    from indexer.errors import NotesSearchError
    from search.mcp_server import NotesTools
    from search.service import NotesService

    os.symlink(ws["outside"] / "secret.md", ws["notes"] / "leak.md")
    os.symlink(ws["outside"] / "sub", ws["notes"] / "leakdir")
    ws["guard"].refresh()
    sync_ok(ws["config"], "--quiet")
    tools = NotesTools(NotesService.from_config_file(str(ws["config"])))
    calls = {
        "search": lambda: tools.search(SECRET, path, 5, "lex"),
        "status": lambda: tools.status(path),
        "reindex": lambda: tools.reindex(path, False),
        "get": lambda: tools.get(path, None, 50),
        "grep": lambda: tools.grep(SECRET, path, False, True),
    }
    for name, call in calls.items():
        try:
            answer = call()
        except NotesSearchError as exc:
            assert "\n" not in str(exc) and SECRET not in str(exc), (name, exc)
            continue
        raise AssertionError(f"MCP {name} accepted {path!r}: {json.dumps(answer, default=str)[:300]}")
    assert SECRET not in json.dumps(index_state(load_config(ws["config"]).db), default=str)


def code_files() -> list[Path]:
    roots = [REPO / "indexer", REPO / "search", REPO / "hooks", REPO / "install.sh"]
    files: list[Path] = []
    for root in roots:
        if root.is_file():
            files.append(root)
        elif root.is_dir():
            files += [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return files


def test_no_shell_with_user_data_anywhere() -> None:
    """A guard: nothing hands a string to a shell (shell=True, os.system, os.popen, getoutput)."""
    pattern = re.compile(
        r"shell\s*=\s*True|os\.system\s*\(|os\.popen\s*\(|subprocess\.getoutput|"
        r"subprocess\.getstatusoutput|\bcommands\.getoutput|pty\.spawn"
    )
    offenders = []
    for path in code_files():
        if path.suffix != ".py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if pattern.search(line.split("#", 1)[0]):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == [], offenders
    # the shell hooks never evaluate what git feeds them (ref names are user data)
    for hook in (REPO / "hooks").iterdir():
        if hook.is_file() and hook.suffix == "" and hook.read_bytes().startswith(b"#!"):
            body = "\n".join(line.split("#", 1)[0] for line in hook.read_text().splitlines())
            assert not re.search(r"\beval\b|\$\(\s*cat|`", body), f"{hook.name} evaluates input"


def test_subprocess_calls_take_argument_lists() -> None:
    """Every subprocess call in the code base passes an argument list, never one command string."""
    offenders = []
    for path in code_files():
        if path.suffix != ".py":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in re.finditer(r"subprocess\.(?:run|Popen|call|check_call|check_output)\(\s*([^\s,)]+)", text):
            first = match.group(1)
            if first.startswith(('f"', "f'", '"', "'")):
                offenders.append(f"{path.relative_to(REPO)}: {match.group(0)}")
    assert offenders == [], offenders


def test_a_backslash_in_a_file_name_gives_a_ref_that_opens(ws: dict[str, Any]) -> None:
    """On POSIX a backslash is an ordinary character of a name: the ref a search returns for
    such a note must open with show (only a leading backslash or a drive prefix is refused)."""
    (ws["notes"] / "a\\b.md").write_text("# Backslash\n\nbackslashmarker here\n", encoding="utf-8")
    ws["guard"].refresh()
    sync_ok(ws["config"], "--quiet")
    found = cli(ws["config"], "query", "backslashmarker", "--mode", "lex", "--json")
    [hit] = json.loads(found.stdout)["results"]
    assert hit["path"] == "a\\b.md"
    shown = cli(ws["config"], "show", hit["ref"])
    assert shown.exit_code == 0 and "backslashmarker" in shown.stdout, shown.output
    for refused in ("notes:\\\\server\\share.md", "notes:\\a.md", "C:\\x.md"):
        assert_one_line_error(cli(ws["config"], "show", refused), "refused")
