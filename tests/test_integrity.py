"""Damage to the SQLite index is said at once, in one line with the way out; reading commands
never make a file where the index should be; `log:` cannot be the index."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from indexer.store import integrity
from indexer.store.integrity import SYNCING, stamp_path
from tests.conftest import assert_one_line_error
from tests.test_crash_safety import kill_at
from tests.test_errors import _many_notes, cli, write_config

pytestmark = pytest.mark.sqlite_only("the SQLite file itself is damaged")


def _noise(db: Path, size: int = 200_000) -> None:
    """Random bytes over the middle of the file, as a bad disk or a stray write would leave."""
    total = db.stat().st_size
    assert total > 2 * size, total
    with db.open("r+b") as out:
        out.seek(total // 2 - size // 2)
        out.write(os.urandom(size))


def _indexed(tmp_path: Path) -> tuple[Path, Path]:
    notes = _many_notes(tmp_path, 300)
    db = tmp_path / "db" / "i.sqlite"
    config = write_config(tmp_path, notes, db=str(db))
    assert cli(config, "sync", "-q").exit_code == 0
    return config, db


def test_noise_in_the_middle_of_the_index_is_said_by_status_query_and_a_plain_sync(tmp_path: Path) -> None:
    config, db = _indexed(tmp_path)
    assert cli(config, "status", "--offline").exit_code == 0
    assert cli(config, "status", "--offline", "--check").exit_code == 0
    _noise(db)
    for command in (
        ["status", "--offline"],
        ["status", "--offline", "--json"],
        ["query", "alpha", "--mode", "lex"],
        ["query", "alpha", "--json"],
        ["sync"],
        ["status", "--offline", "--check"],
    ):
        assert_one_line_error(cli(config, *command), str(db), "damaged", f"`rm {db}`", "sync --full")


def test_a_check_that_passes_says_so(tmp_path: Path) -> None:
    """`status --check` on a whole index printed what `status` prints: nothing told that the
    file was read. It says so now, in text and JSON; a plain status says nothing of a check."""
    config, _ = _indexed(tmp_path)
    checked = cli(config, "status", "--offline", "--check")
    assert checked.exit_code == 0 and "check: ok: the whole index file was read" in checked.stdout
    assert json.loads(cli(config, "status", "--offline", "--check", "--json").stdout)["check"].startswith("ok:")
    plain = cli(config, "status", "--offline")
    assert plain.exit_code == 0 and "check:" not in plain.stdout
    assert json.loads(cli(config, "status", "--offline", "--json").stdout)["check"] is None


def test_a_sync_checks_the_whole_file_after_a_crashed_one(tmp_path: Path) -> None:
    """A crashed sync leaves its mark; damage the stamp cannot see (the file's size and times
    put back) is then found by the next sync, though readers trust a running sync's file."""
    config, db = _indexed(tmp_path)
    stamp = stamp_path(db)
    assert stamp.read_text() != SYNCING  # an ended sync stamps the file as checked
    before = db.stat()
    _noise(db)
    os.utime(db, ns=(before.st_atime_ns, before.st_mtime_ns))
    stamp.write_text(SYNCING)  # what a sync killed mid-run leaves
    assert_one_line_error(cli(config, "sync"), str(db), "damaged", "sync --full")


def _as_verified(db: Path) -> str:
    """The stamp of a file checked as it is now: its size, mtime and inode."""
    st = db.stat()
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ino}"


def test_a_sync_that_writes_nothing_leaves_the_stamp_and_one_that_writes_marks_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cron tick with nothing new writes no stamp (it was written twice a tick); a sync that
    writes marks it at its first write and stamps the file verified at its end, once each."""
    notes = _many_notes(tmp_path, 20)
    db = tmp_path / "db" / "i.sqlite"
    config = write_config(tmp_path, notes, db=str(db))
    assert cli(config, "sync", "-q").exit_code == 0
    writes: list[str] = []
    write_stamp = integrity._write_stamp

    def counted(index: Path, text: str) -> None:
        writes.append(text)
        write_stamp(index, text)

    monkeypatch.setattr(integrity, "_write_stamp", counted)
    stamp = stamp_path(db)
    assert stamp.read_text() == _as_verified(db)
    before = stamp.stat()
    for _ in range(2):
        assert cli(config, "sync", "-q").exit_code == 0
    assert writes == [], writes  # nothing written to the index: the stamp is not touched at all
    assert (stamp.stat().st_ino, stamp.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert stamp.read_text() == _as_verified(db)

    (notes / "n3.md").write_text("# Note 3\n\nchanged\n", encoding="utf-8")
    assert cli(config, "sync", "-q").exit_code == 0
    assert writes == [SYNCING, _as_verified(db)]


def test_a_sync_killed_after_its_first_write_transaction_leaves_the_mark(tmp_path: Path) -> None:
    """The mark is written before the first transaction begins: killed once that one has
    committed, the sync leaves `syncing`, and the next sync checks the whole file and stamps it."""
    notes = _many_notes(tmp_path, 20)
    db = tmp_path / "db" / "i.sqlite"
    config = write_config(tmp_path, notes, db=str(db))
    assert cli(config, "sync", "-q").exit_code == 0
    assert stamp_path(db).read_text() == _as_verified(db)
    (notes / "n3.md").write_text("# Note 3\n\nchanged\n", encoding="utf-8")
    kill_at(config, "sql@BEGIN IMMEDIATE@2")
    assert stamp_path(db).read_text() == SYNCING
    assert cli(config, "sync", "-q").exit_code == 0
    assert stamp_path(db).read_text() == _as_verified(db)


@pytest.mark.parametrize(
    "command",
    [
        ("status", "--offline"),
        ("status", "--json"),
        ("query", "alpha"),
        ("query", "alpha", "--json"),
        ("toc",),
        ("collections",),
        ("show", "notes:n1.md"),
        ("grep", "alpha"),
    ],
)
def test_reading_commands_never_create_the_index(tmp_path: Path, command: tuple[str, ...]) -> None:
    notes = _many_notes(tmp_path, 3)
    db = tmp_path / "db" / "i.sqlite"
    config = write_config(tmp_path, notes, db=str(db))
    result = cli(config, *command)
    assert not db.exists() and not (tmp_path / "db").exists()
    if result.exit_code != 0:  # show and grep read the files themselves
        assert_one_line_error(result, "no index", "notes-search sync")


def test_an_empty_file_at_the_index_path_is_no_index(tmp_path: Path) -> None:
    notes = _many_notes(tmp_path, 3)
    db = tmp_path / "db" / "i.sqlite"
    db.parent.mkdir()
    db.write_bytes(b"")
    config = write_config(tmp_path, notes, db=str(db))
    assert_one_line_error(cli(config, "status"), "no index at", "notes-search sync")
    assert db.read_bytes() == b""


@pytest.mark.parametrize("log", ["db/i.sqlite", "./db/../db/i.sqlite"])
def test_a_log_that_is_the_index_is_a_config_error(tmp_path: Path, log: str) -> None:
    notes = _many_notes(tmp_path, 3)
    config = write_config(tmp_path, notes, db="db/i.sqlite", log=log)
    for command in (("status",), ("sync",)):
        assert_one_line_error(cli(config, *command), "log:", "`db:`")
    assert not (tmp_path / "db").exists()
