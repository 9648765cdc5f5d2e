"""Exit codes a script can trust, as grep's: `query` and `grep` exit 0 with hits, 1 when nothing
matched (every format still printing its output), 2 on a usage error, 1 on other failures.

Through the click CLI on a real index, and once through a real process (what `if notes-search
grep ...` in a shell sees)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from search.cli.formats import HIT_FORMATS
from tests.conftest import synced_cli

Run = Callable[..., Result]


@pytest.fixture
def run(config_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return synced_cli(config_path, monkeypatch)


@pytest.mark.parametrize("fmt", HIT_FORMATS)
def test_query_exits_0_with_hits_and_1_without_in_every_format(run: Run, fmt: str) -> None:
    found = run("query", "restic", "--format", fmt)
    assert found.exit_code == 0 and found.stdout, found.output
    nothing = run("query", "xyzzynotfound", "--mode", "lex", "--format", fmt)
    assert nothing.exit_code == 1, nothing.output
    assert "Error" not in nothing.stderr  # nothing matched: not a failure
    if fmt == "json":
        assert json.loads(nothing.stdout)["results"] == []
    if fmt == "csv":
        assert nothing.stdout.startswith("rank,ref,")  # the header still comes


@pytest.mark.parametrize("fmt", HIT_FORMATS)
def test_grep_exits_0_with_matches_and_1_without_in_every_format(run: Run, fmt: str) -> None:
    found = run("grep", "restic", "--format", fmt)
    assert found.exit_code == 0 and found.stdout, found.output
    nothing = run("grep", "xyzzynotfound", "--format", fmt)
    assert nothing.exit_code == 1, nothing.output
    assert "Error" not in nothing.stderr
    if fmt == "json":
        data = json.loads(nothing.stdout)
        assert data["results"] == [] and data["pattern"] == "xyzzynotfound"


def test_json_flag_prints_its_object_when_nothing_matched(run: Run) -> None:
    for command in ("query", "grep"):  # hybrid finds a nearest note by meaning: lex can find nothing
        nothing = run(command, "xyzzynotfound", "--json", *(["--mode", "lex"] if command == "query" else []))
        assert nothing.exit_code == 1 and json.loads(nothing.stdout)["results"] == [], command


@pytest.mark.parametrize(
    "args",
    [
        ("query", "x", "--mode", "fuzzy"),
        ("query", "x", "--no-such-flag"),
        ("query",),
        ("query", "x", "--json", "--format", "csv"),
        ("grep",),
        ("grep", "x", "--max-count", "0"),
        ("grep", "x", "--format", "yaml"),
        ("query", "x", "--source", "nope"),
        ("grep", "x", "--source", "nope"),
        ("sync", "--source", "nope"),
        ("toc", "--source", "notes", "--source", "nope"),
    ],
)
def test_usage_errors_exit_2(run: Run, args: tuple[str, ...]) -> None:
    assert run(*args).exit_code == 2


def test_an_unknown_source_is_a_usage_error_naming_the_configured_ones(run: Run) -> None:
    refused = run("query", "x", "--source", "nope")
    assert refused.exit_code == 2 and refused.stdout == "", refused.output
    assert refused.stderr.startswith("Usage: ")
    assert refused.stderr.endswith("Error: Invalid value for '--source': unknown source 'nope' (configured: notes)\n")


@pytest.mark.parametrize(
    "args",
    [
        ("grep", "x", "--path", "notes:../../etc"),
        ("show", "notes:nope.md"),
    ],
)
def test_other_failures_exit_1_with_an_error_line(run: Run, args: tuple[str, ...]) -> None:
    failed = run(*args)
    assert failed.exit_code == 1 and failed.stderr.startswith("Error:"), failed.output


def test_a_shell_script_can_branch_on_grep_and_query(run: Run, config_path: Path) -> None:
    """What `if notes-search grep ...; then` sees from a real process (lexical: no embedder)."""
    env = {**os.environ, "NOTES_SEARCH_CONFIG": str(config_path)}
    script = (
        "import sys; from search.cli import main; sys.argv[0] = 'notes-search'; main()"  # the installed entry point
    )

    def code(*args: str) -> int:
        return subprocess.run(
            [sys.executable, "-c", script, *args], env=env, capture_output=True, check=False, cwd=Path.cwd()
        ).returncode

    assert code("grep", "-F", "restic") == 0
    assert code("grep", "-F", "xyzzynotfound") == 1
    assert code("query", "restic", "--mode", "lex") == 0
    assert code("query", "xyzzynotfound", "--mode", "lex", "--json") == 1
    assert code("query", "x", "--mode", "fuzzy") == 2
