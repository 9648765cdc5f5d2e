"""Sync progress as a person sees it: a real `notes-search sync` on a pseudo-terminal draws bars
with a rate and an ETA; without a terminal (cron, hooks) or with --quiet it prints nothing."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from search.cli.progress import StageProgress
from tests.embed_servers import OllamaServer

REPO = Path(__file__).resolve().parent.parent
NOTES_SEARCH = str(Path(sys.executable).with_name("notes-search"))
NOTES = 12
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def server() -> Iterator[OllamaServer]:
    with OllamaServer() as srv:
        srv.delay = 0.1  # a slow-ish model: several batches, each a visible step
        yield srv


def write_config(tmp_path: Path, endpoint: str, db_url: str | None) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    for n in range(NOTES):
        (notes / f"note{n}.md").write_text(f"# Note {n}\n\nbackup host db-{n:02}.lan runs restic nightly\n")
    home = tmp_path / "home"
    home.mkdir()
    data = {
        "root": str(home),
        "embedding": {"provider": "ollama", "model": "fake-embed:latest", "endpoint": endpoint, "dims": 64, "batch": 2},
        "sources": {"workspace": {"notes": {"root": str(notes), "paths": ["**"]}}},
    } | ({"db": db_url} if db_url else {})
    path = home / "notes-search.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOTES_SEARCH") and "proxy" not in k.lower()}
    env.update(PYTHONPATH=str(REPO), COLUMNS="120", TERM="xterm")
    return env


def run_on_terminal(*args: str) -> tuple[int, str]:
    """The CLI with stdout and stderr on a pseudo-terminal; (exit code, everything it drew)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [NOTES_SEARCH, *args], stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=child_env()
    )
    os.close(follower)
    drawn = bytearray()
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        drawn += data
    os.close(leader)
    return proc.wait(timeout=60), drawn.decode("utf-8", "replace")


def frames(drawn: str) -> list[str]:
    """Each redraw of a bar line, escape codes removed."""
    return [ANSI.sub("", frame).strip() for frame in re.split(r"[\r\n]", drawn) if frame.strip()]


def test_sync_on_a_terminal_shows_rate_and_eta(tmp_path: Path, server: OllamaServer, db_url: str | None) -> None:
    config = write_config(tmp_path, server.url, db_url)
    code, drawn = run_on_terminal("--config", str(config), "sync")
    assert code == 0, drawn
    shown = frames(drawn)
    embed = [frame for frame in shown if frame.startswith("embed")]
    # counted per model batch (2 texts), not once per page: every step of the way is drawn
    positions = {int(m.group(1)) for frame in embed if (m := re.search(r"\b(\d+)/(\d+)\b", frame))}
    assert positions == set(range(0, NOTES + 1, 2)), embed
    assert any(re.search(r"\d+/\d+ +\d+% +[\d.]+ chunks/s +ETA \d+:\d\d:\d\d", frame) for frame in embed), embed
    assert any(re.search(r"^files .* \d+ +[\d.…]+ files/s", frame) for frame in shown), shown
    assert "notes: +12 ~0 -0" in drawn
    assert "\x1b[?25h" in drawn  # the cursor click hid while drawing is shown again


def test_quiet_on_a_terminal_prints_nothing(tmp_path: Path, server: OllamaServer, db_url: str | None) -> None:
    config = write_config(tmp_path, server.url, db_url)
    code, drawn = run_on_terminal("--config", str(config), "sync", "--quiet")
    assert (code, drawn) == (0, "")


def test_sync_without_a_terminal_prints_nothing(tmp_path: Path, server: OllamaServer, db_url: str | None) -> None:
    config = write_config(tmp_path, server.url, db_url)
    done = subprocess.run(
        [NOTES_SEARCH, "--config", str(config), "sync"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert len(server.embed_requests) == NOTES // 2  # it did embed: the silence is not a skipped sync


class Terminal:
    """A text stream that says it is a terminal and keeps what was written."""

    def __init__(self) -> None:
        self.written: list[str] = []

    def write(self, text: str) -> int:
        self.written.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True


def test_a_restarted_count_opens_a_new_bar_and_a_label_is_escaped() -> None:
    screen = Terminal()
    with StageProgress(screen) as progress:  # type: ignore[arg-type]
        for done in (1, 2, 3):
            progress("files", done, 0)
        progress("files", 1, 0)  # the next source's scan
        progress("emb\x1b]0;x\x07ed", 0, 4)
        progress("emb\x1b]0;x\x07ed", 4, 4)
    text = "".join(screen.written)
    closed = text.count("\x1b[?25h\n")
    assert closed == 3, text
    assert "\x1b]" not in text and "4/4" in text
