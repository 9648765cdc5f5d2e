"""Recorded CLI and MCP outputs: what a user and an agent see, byte for byte.

A refactoring must not change them. `tests/test_golden.py` replays every recorded command
against a freshly built, fully deterministic workspace and compares. When a change of output
is intended, re-record and review the diff like code:

    PYTHONPATH=. .venv/bin/python -m tests.golden --update

Determinism: the notes are examples/notes with fixed mtimes, the git source is committed with
fixed names and dates (so its revisions are stable), embeddings come from the Ollama-protocol
test server (hash vectors), and what still varies between runs (the temporary folder, the test
server's port, clock readings) is replaced by placeholders before comparing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
EXAMPLES = REPO / "examples" / "notes"
FIXED_MTIME = 1_700_000_000  # 2023-11-14: every example note gets the same, stable mtime
GIT_DATES = ("2024-01-02T10:00:00+00:00", "2024-02-03T11:00:00+00:00")

GIT_FILES_FIRST = {
    "README.md": "# Team handbook\n\nWhere the team writes down how things work.\n",
    "ops/deploy.md": (
        "---\ntitle: Deploying the API\ntags: [ops, deploy]\n---\n# Deploying the API\n\n"
        "Run `make deploy` from a clean checkout. The release tag looks like `v2.14.3`.\n\n"
        "## Rollback\n\nRoll back with `make rollback TAG=v2.14.2`; it takes about 90 seconds.\n"
    ),
    "ops/oncall.md": "# On-call\n\nThe pager rotation changes every Monday at 09:00 CET.\n",
}
GIT_FILES_SECOND = {
    "ops/oncall.md": (
        "# On-call\n\nThe pager rotation changes every Monday at 09:00 CET.\n\n"
        "## Escalation\n\nPage the secondary after 15 minutes without an acknowledgement.\n"
    ),
    "ops/runbooks/disk-full.md": "# Disk full\n\nClear `/var/log/journal` with `journalctl --vacuum-size=500M`.\n",
}

# (name, arguments after `--config CONFIG`). Order matters: `sync` runs first.
CLI_COMMANDS: list[tuple[str, list[str]]] = [
    ("sync-json", ["sync", "--json"]),
    ("sync-again", ["sync"]),
    ("status", ["status", "--offline"]),
    ("status-json", ["status", "--offline", "--json"]),
    ("status-path", ["status", "--offline", "notes:devops"]),
    ("status-csv", ["status", "--offline", "--format", "csv"]),
    ("query", ["query", "záloha databáze restic"]),
    ("query-json", ["query", "záloha databáze restic", "--json"]),
    ("query-explain", ["query", "wireguard port", "--explain"]),
    ("query-lex-json", ["query", "51820/udp", "--mode", "lex", "--json"]),
    ("query-vec-json", ["query", "how do I roll back a release", "--mode", "vec", "-k", "3", "--json"]),
    ("query-source-git", ["query", "rollback", "--source", "team", "--json"]),
    ("query-collection", ["query", "recept", "--collection", "cooking", "-k", "3"]),
    ("query-path", ["query", "disk", "--path", "notes:devops", "-k", "3"]),
    ("query-nothing", ["query", "xyzzynotfound", "--mode", "lex"]),
    ("query-full", ["query", "51820/udp", "--mode", "lex", "-k", "1", "--full"]),
    ("show", ["show", "notes:devops/wireguard.md"]),
    ("show-range", ["show", "notes:devops/wireguard.md:5:4"]),
    ("show-json", ["show", "team:ops/deploy.md:1:6", "--json"]),
    ("show-git", ["show", "team:ops/oncall.md"]),
    ("query-csv", ["query", "51820/udp", "--mode", "lex", "-k", "2", "--format", "csv"]),
    ("query-md", ["query", "rollback", "--source", "team", "-k", "2", "--format", "md"]),
    ("query-files", ["query", "wireguard", "--format", "files"]),
    ("show-many", ["show", "notes:devops/wire*.md", "team:ops/**", "--max-lines", "40"]),
    ("grep", ["grep", "51820"]),
    ("grep-jsonl", ["grep", "CET", "--format", "jsonl"]),
    ("grep-md", ["grep", "51820", "--format", "md"]),
    ("grep-json", ["grep", "rollback", "-i", "--json"]),
    ("grep-source", ["grep", "CET", "--source", "team"]),
    ("toc", ["toc"]),
    ("toc-json", ["toc", "--source", "team", "--json"]),
    ("collections", ["collections"]),
    ("collections-json", ["collections", "--json"]),
    ("route", ["route", "jak upéct chleba"]),
    ("route-json", ["route", "wireguard vpn", "--json"]),
    ("reindex-json", ["reindex", "notes:devops/wireguard.md", "--json"]),
    ("eval-json", ["eval", "questions.yaml", "--json"]),
    ("error-show-missing", ["show", "notes:nope.md"]),
    ("error-unknown-source", ["query", "x", "--source", "nope"]),
    ("error-bad-mode", ["query", "x", "--mode", "fuzzy"]),
    ("error-outside", ["show", "notes:../secret.md"]),
]

# (name, tool, arguments) for the MCP server over stdio, after tools/list.
MCP_CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("search", "search", {"query": "záloha databáze restic"}),
    ("search-lex-scoped", "search", {"query": "rollback", "mode": "lex", "path": "team:ops"}),
    ("search-k", "search", {"query": "borsch", "k": 2}),
    ("search-snippet", "search", {"query": "51820/udp", "k": 3, "detail": "snippet"}),
    ("status", "status", {}),
    ("get", "get", {"path": "notes:devops/wireguard.md:1", "max_lines": 8}),
    ("get-git", "get", {"path": "team:ops/deploy.md"}),
    ("get-many", "get", {"path": ["team:ops/*.md", "notes:nope.md"], "max_lines": 20}),
    ("grep", "grep", {"pattern": "51820"}),
    ("collections", "collections", {}),
    ("route", "route", {"question": "jak upéct chleba"}),
    ("reindex", "reindex", {"path": "notes:devops/wireguard.md"}),
    ("error-get-missing", "get", {"path": "notes:nope.md"}),
    ("error-search-outside", "search", {"query": "x", "path": "notes:../../etc"}),
    ("error-search-unknown-argument", "search", {"query": "x", "limit": 2}),
    ("toc", "toc", {"source": "notes", "max_bytes": 600}),
]

CLI_MAIN = "import sys; from search.cli import main; sys.argv[0] = 'notes-search'; main()"

QUESTIONS = """\
- question: "Which port does WireGuard listen on?"
  path: devops/wireguard.md
  kind: exact
- question: "how to roll back a deploy"
  path: team:ops/deploy.md
  kind: semantic
"""


@dataclass
class Workspace:
    root: Path
    config: Path
    embed_url: str


def _git(cwd: Path, *args: str, date: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Golden",
        "GIT_AUTHOR_EMAIL": "golden@example.invalid",
        "GIT_COMMITTER_NAME": "Golden",
        "GIT_COMMITTER_EMAIL": "golden@example.invalid",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def build_workspace(root: Path, embed_url: str) -> Workspace:
    """examples/notes (fixed mtimes) as a workspace source and a two-commit git repository."""
    notes = root / "notes"
    shutil.copytree(EXAMPLES, notes)
    for path in [notes, *notes.rglob("*")]:
        os.utime(path, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
    upstream = root / "upstream"
    upstream.mkdir()
    _git(upstream, "init", "-q", "-b", "main", date=GIT_DATES[0])
    for files, date in ((GIT_FILES_FIRST, GIT_DATES[0]), (GIT_FILES_SECOND, GIT_DATES[1])):
        _write(upstream, files)
        _git(upstream, "add", "-A", date=date)
        _git(upstream, "commit", "-q", "-m", f"notes of {date[:10]}", date=date)
    (root / "questions.yaml").write_text(QUESTIONS, encoding="utf-8")
    config = root / "notes-search.yaml"
    config.write_text(
        f"""\
root: {root}
embedding:
  provider: ollama
  model: fake-embed:latest
  endpoint: {embed_url}
  dims: 64
sources:
  git:
    team: {{url: {upstream}, mirror: mirrors/team.git}}
  workspace:
    notes:
      root: notes
      paths: ["**"]
      exclude: ["drafts/**", "inbox.md"]
""",
        encoding="utf-8",
    )
    return Workspace(root=root, config=config, embed_url=embed_url)


_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_DURATION = re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s)\b")
_JSON_SECONDS = re.compile(r'("(?:seconds|elapsed|elapsed_s|duration|duration_s|took|took_ms|ms)": )[0-9.e-]+')


def normalise(text: str, ws: Workspace) -> str:
    """Replace what legitimately differs between runs by placeholders."""
    text = text.replace(str(ws.root), "<ROOT>").replace(ws.embed_url, "<EMBED_URL>")
    text = _TIMESTAMP.sub("<TIME>", text)
    text = _JSON_SECONDS.sub(r"\1<SECONDS>", text)
    text = _DURATION.sub("<DURATION>", text)
    return text


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTES_SEARCH_", "GIT_"))}
    env.update(
        PYTHONPATH=str(REPO),
        NO_COLOR="1",
        COLUMNS="100",
        LC_ALL="C.UTF-8",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
    )
    return env


def run_cli(ws: Workspace, args: list[str]) -> str:
    """One `notes-search` process, as a user runs it (not a terminal: no colours, no progress)."""
    done = subprocess.run(
        [sys.executable, "-c", CLI_MAIN, "--config", str(ws.config), *args],
        cwd=ws.root,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return (
        f"$ notes-search {' '.join(args)}\n[exit {done.returncode}]\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
    )


def run_mcp(ws: Workspace) -> dict[str, str]:
    """tools/list and every call in MCP_CALLS through the official client over stdio."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", CLI_MAIN, "--config", str(ws.config), "mcp"],
        env=_env(),
        cwd=str(ws.root),
    )
    out: dict[str, str] = {}

    async def session_body() -> None:
        with open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                init = await session.initialize()
                out["mcp-initialize"] = json.dumps(
                    {
                        "server": init.server_info.model_dump(mode="json"),
                        "instructions": init.instructions,
                    },
                    indent=2,
                    ensure_ascii=False,
                    sort_keys=True,
                )
                listed = await session.list_tools()
                out["mcp-tools"] = json.dumps(
                    [tool.model_dump(mode="json", exclude_none=True) for tool in listed.tools],
                    indent=2,
                    ensure_ascii=False,
                    sort_keys=True,
                )
                for name, tool, arguments in MCP_CALLS:
                    result = await session.call_tool(tool, arguments)
                    texts = [_readable(getattr(item, "text", repr(item))) for item in result.content]
                    out[f"mcp-{name}"] = (
                        f"call {tool} {json.dumps(arguments, ensure_ascii=False, sort_keys=True)}\n"
                        f"[is_error {result.is_error}]\n" + "\n".join(texts) + "\n"
                    )

    anyio.run(session_body)
    return out


def _readable(text: str) -> str:
    """A tool's compact JSON answer indented for review (tests/test_mcp_wire.py pins the compact
    form on the wire); an error's plain line as it is."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


@contextmanager
def recorded_workspace(root: Path) -> Iterator[Workspace]:
    from tests.embed_servers import OllamaServer

    server = OllamaServer({"fake-embed:latest": 64})
    try:
        yield build_workspace(root, server.url)
    finally:
        server.stop()


def record(root: Path) -> dict[str, str]:
    """Every recorded output, normalised, keyed by its golden file's stem."""
    outputs: dict[str, str] = {}
    with recorded_workspace(root) as ws:
        for name, args in CLI_COMMANDS:
            outputs[f"cli-{name}"] = normalise(run_cli(ws, args), ws)
        for name, text in run_mcp(ws).items():
            outputs[name] = normalise(text, ws)
    return outputs


def golden_files() -> dict[str, str]:
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(GOLDEN.glob("*.txt"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="rewrite tests/golden/*.txt from this checkout")
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        outputs = record(Path(tmp))
    if not args.update:
        old = golden_files()
        changed = sorted(name for name in outputs.keys() | old.keys() if outputs.get(name) != old.get(name))
        print("\n".join(changed) or "no changes")
        sys.exit(1 if changed else 0)
    GOLDEN.mkdir(exist_ok=True)
    for stale in GOLDEN.glob("*.txt"):
        if stale.stem not in outputs:
            stale.unlink()
    for name, text in outputs.items():
        (GOLDEN / f"{name}.txt").write_text(text, encoding="utf-8")
    print(f"wrote {len(outputs)} files to {GOLDEN}")


if __name__ == "__main__":
    main()
