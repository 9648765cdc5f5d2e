"""CLI and MCP outputs of a recorded set of commands stay byte-identical (see tests/golden.py)."""

from __future__ import annotations

import difflib
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.golden import CLI_COMMANDS, MCP_CALLS, golden_files, record

pytestmark = pytest.mark.sqlite_only(
    "the recording is of a SQLite index (status names its file, scores are SQLite's BM25), byte for byte"
)

RERECORD = "re-record with `PYTHONPATH=. .venv/bin/python -m tests.golden --update`"


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict[str, str]]:
    """Two workspaces built apart and recorded at once: each command is a process of its own
    that mostly waits on its interpreter's start, so the two recordings share the cores."""
    roots = [tmp_path_factory.mktemp("golden"), tmp_path_factory.mktemp("golden-again")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        first, second = pool.map(record, roots)
    return first, second


@pytest.fixture(scope="module")
def outputs(recordings: tuple[dict[str, str], dict[str, str]]) -> dict[str, str]:
    return recordings[0]


def test_every_recorded_command_has_a_golden_file() -> None:
    expected = {f"cli-{name}" for name, _ in CLI_COMMANDS} | {f"mcp-{name}" for name, _, _ in MCP_CALLS}
    expected |= {"mcp-initialize", "mcp-tools"}
    assert set(golden_files()) == expected, RERECORD


def test_outputs_match_the_recording(outputs: dict[str, str]) -> None:
    golden = golden_files()
    diffs = []
    for name in sorted(golden):
        if outputs.get(name) != golden[name]:
            diff = difflib.unified_diff(
                golden[name].splitlines(keepends=True),
                outputs.get(name, "").splitlines(keepends=True),
                fromfile=f"golden/{name}.txt",
                tofile="now",
            )
            diffs.append("".join(diff))
    assert not diffs, f"outputs changed; if intended, {RERECORD} and review the diff:\n" + "\n".join(diffs)[:20000]


def test_recording_is_deterministic(recordings: tuple[dict[str, str], dict[str, str]]) -> None:
    """Two workspaces built apart give the same outputs: nothing unnormalised leaks in."""
    first, again = recordings
    assert again == first
