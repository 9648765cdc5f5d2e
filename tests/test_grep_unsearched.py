"""grep never says "no matches" about what it could not search: a deleted mirror, a folder or
a file that cannot be read are named (stderr, `unsearched` in JSON and MCP); nothing searched
at all is a one-line error, exit 1. ripgrep, the Python fallback and `git grep` alike."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from indexer.config import load_config
from indexer.errors import NotesSearchError
from search.cli import cli
from search.mcp_server import NotesTools
from search.service import NotesService
from tests.conftest import assert_one_line_error, write
from tests.test_crash_safety import subprocess_env
from tests.test_show_grep_toc import build_world

# Runs the CLI; "fallback" hides rg, so the Python matcher searches instead.
DRIVER = """\
import shutil, sys
if sys.argv[1] == "fallback":
    which = shutil.which
    shutil.which = lambda name, *a, **k: None if name == "rg" else which(name, *a, **k)
sys.argv = ["notes-search", *sys.argv[2:]]
from search.cli import main
main()
"""
DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


@pytest.fixture(scope="module")
def unprivileged() -> list[str]:
    """A command prefix under which file permissions apply: none for a normal user; for root,
    setpriv without the capabilities that bypass them."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    probe = subprocess.run([*DROP_DAC, sys.executable, "-c", "open('/proc/self/status').read()"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop the capabilities here: {probe.stderr.decode(errors='replace').strip()}")
    return DROP_DAC


@pytest.fixture
def locked_world(tmp_path: Path) -> Iterator[Path]:
    """A workspace with a readable note, an unreadable file and an unreadable folder."""
    notes = tmp_path / "notes"
    write(
        notes,
        {
            "open.md": "# Open\n\nneedle in the open\n",
            "locked.md": "# Locked\n\nneedle locked\n",
            "sub/inner.md": "# Inner\n\nneedle inside\n",
        },
    )
    (tmp_path / "notes-search.yaml").write_text(
        f"root: {tmp_path}\nsources:\n  workspace:\n    notes:\n      root: {notes}\n      paths: ['**']\n",
        encoding="utf-8",
    )
    (notes / "locked.md").chmod(0)
    (notes / "sub").chmod(0)
    try:
        yield tmp_path / "notes-search.yaml"
    finally:
        (notes / "sub").chmod(stat.S_IRWXU)
        (notes / "locked.md").chmod(stat.S_IRUSR | stat.S_IWUSR)


def run_cli(prefix: list[str], matcher: str, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-c", DRIVER, matcher, "--config", str(config), *args],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("matcher", ["rg", "fallback"])
def test_unreadable_file_and_folder_are_named(unprivileged: list[str], locked_world: Path, matcher: str) -> None:
    if matcher == "rg" and shutil.which("rg") is None:
        pytest.skip("rg is not installed")
    human = run_cli(unprivileged, matcher, locked_world, "grep", "needle")
    assert human.returncode == 0, human.stderr
    assert human.stdout.splitlines() == ["notes:open.md:3: needle in the open"]
    assert sorted(human.stderr.splitlines()) == [
        "warning: not searched: notes:locked.md (permission denied)",
        "warning: not searched: notes:sub/ (permission denied)",
    ]
    data = json.loads(run_cli(unprivileged, matcher, locked_world, "grep", "needle", "--json").stdout)
    assert [r["path"] for r in data["results"]] == ["open.md"]
    assert sorted(data["unsearched"], key=lambda u: u["path"]) == [
        {"source": "notes", "path": "locked.md", "reason": "permission denied"},
        {"source": "notes", "path": "sub/", "reason": "permission denied"},
    ]
    # no match in what could be read: said so, and what was missed is named
    none = run_cli(unprivileged, matcher, locked_world, "grep", "haystack")
    assert none.returncode == 1 and "no matches in what could be searched" in none.stderr
    assert "notes:locked.md" in none.stderr
    # nothing readable in scope: an error, not "no matches"
    for scope in ("locked.md", "sub"):
        only = run_cli(unprivileged, matcher, locked_world, "grep", "needle", "--path", scope, "--json")
        assert only.returncode == 1 and only.stdout == ""
        lines = only.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: nothing could be searched: notes:"), lines
        assert "permission denied" in lines[0]


def test_deleted_mirror_is_named_cli_and_mcp(tmp_path: Path, db_url: str | None) -> None:
    config_path = build_world(tmp_path, db_url)
    shutil.rmtree(load_config(config_path).sources["wiki"].mirror)  # type: ignore[union-attr]
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(cli, ["--config", str(config_path), *args], catch_exceptions=False)

    everything = run("grep", "db-01", "--json")
    assert everything.exit_code == 0
    data = json.loads(everything.stdout)
    assert {r["source"] for r in data["results"]} == {"notes"}  # the workspace is still searched
    [missed] = data["unsearched"]
    assert missed["source"] == "wiki" and missed["path"] is None and "git grep failed" in missed["reason"]
    assert everything.stderr.startswith("warning: not searched: wiki (")
    assert_one_line_error(run("grep", "db-01", "--source", "wiki"), "nothing could be searched: wiki")
    tools = NotesTools(NotesService.from_config_file(str(config_path)))
    answer = tools.grep("db-01", None, False, False)
    assert answer["count"] > 0 and [u["source"] for u in answer["unsearched"]] == ["wiki"]
    assert "not searched" in answer["notice"]
    with pytest.raises(NotesSearchError, match="nothing could be searched: wiki"):
        tools.grep("db-01", "wiki", False, False)
    clean = tools.grep("port 6432", "other", False, False)
    assert clean["unsearched"] == [] and clean["notice"] is None and clean["count"] == 1
