"""README's command table and SKILL's tool table name every flag and argument there is: a flag
added on a branch and missing from the docs is a flag nobody finds."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import click
import pytest

from search.cli import cli
from search.mcp_server import NotesTools

REPO = Path(__file__).resolve().parent.parent


def table_row(document: str, first_cell: str) -> str:
    """The first cell of the table row that starts with `first_cell` (escaped pipes as `/`)."""
    for line in (REPO / document).read_text(encoding="utf-8").splitlines():
        if line.startswith(f"| `{first_cell}"):
            match = re.match(r"^\| (.*?) \| ", line.replace("\\|", "/"))
            assert match is not None, line
            return match.group(1)
    raise AssertionError(f"{document} has no row for {first_cell!r}")


@pytest.mark.parametrize("name", ["query", "grep", "show", "status", "sync", "serve"])
def test_readme_row_names_every_option(name: str) -> None:
    row = table_row("README.md", f"{name} ")
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    for param in command.params:
        if isinstance(param, click.Option) and "--help" not in param.opts:
            assert any(opt in row for opt in param.opts + param.secondary_opts), (name, param.opts, row)


def test_skill_search_row_names_every_tool_argument_and_flag() -> None:
    lines = (REPO / "SKILL.md").read_text(encoding="utf-8").splitlines()
    _, arguments, equivalent = next(line for line in lines if line.startswith("| `search` |")).split(" | ")
    for argument in inspect.signature(NotesTools.search).parameters:
        if argument != "self":
            assert f"`{argument}" in arguments, argument
    for flag in ("--tag", "--since", "--until", "--per-file", "--min-similarity", "--mode", "-k"):
        assert flag in equivalent, flag
