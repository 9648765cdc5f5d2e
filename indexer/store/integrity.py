"""Damage to the SQLite index file found when it is opened, not in the middle of some later query.

`PRAGMA quick_check` reads every page, so it runs only when the file changed since the last
good check: a stamp next to the index records the file's size, mtime and inode as last
verified, and a sync, whose own writes SQLite keeps consistent, renews the stamp when it ends.
A sync marks the stamp `syncing` from its first write transaction on: finding that mark, the
next sync knows the last one crashed and checks the whole file. A sync that writes nothing
(a cron tick with nothing new) leaves the stamp as it was. Anything else that changes the file (noise written into
it, a disk error, a copy from a backup) leaves the stamp stale, and the next open checks:
always a sync or `status`, a search or a read when the file is small enough to check quickly.
"""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from indexer.errors import StoreError

# a search or a read checks a changed file up to this size (quick_check reads some hundreds of
# MB/s); larger ones are checked by `status` and `sync`
READ_CHECK_MAX_BYTES = 256 << 20
SYNCING = "syncing"


def stamp_path(index: Path) -> Path:
    return index.with_name(f".{index.name}.checked")


def _signature(index: Path) -> str | None:
    try:
        st = os.stat(index)
    except OSError:
        return None
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ino}"


def _read_stamp(index: Path) -> str | None:
    try:
        return stamp_path(index).read_text(encoding="utf-8").strip()
    except (OSError, ValueError):
        return None


def _write_stamp(index: Path, text: str) -> None:
    target = stamp_path(index)
    tmp = target.with_name(target.name + f".{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except OSError:
        pass  # a folder this user cannot write: the next open checks again, nothing worse


def damaged(index: Path, problem: str) -> StoreError:
    """The one line for a damaged index: what SQLite found, and the way out."""
    return StoreError(
        f"index {index}: it is not a usable SQLite index, it is damaged ({problem}); remove it"
        f" (`rm {index}`) and run `notes-search sync --full` to rebuild it from the notes"
    )


def verify(conn: apsw.Connection, index: Path, *, full: bool = False) -> None:
    """Check the whole file (`integrity_check` when `full`, else `quick_check`): StoreError
    naming the first problem, or a renewed stamp."""
    signature = _signature(index)
    pragma = "integrity_check(1)" if full else "quick_check(1)"
    try:
        rows = conn.execute(f"PRAGMA {pragma}").fetchall()
    except apsw.Error as exc:
        raise damaged(index, str(exc)) from None
    if rows != [("ok",)]:
        raise damaged(index, " ".join(str(rows[0][0]).split()) if rows else "no answer")
    if signature is not None:
        _write_stamp(index, signature)


def check_if_changed(conn: apsw.Connection, index: Path) -> None:
    """`verify` unless the stamp says the file is unchanged since its last good check."""
    if _read_stamp(index) != _signature(index):
        verify(conn, index)


def check_on_open(conn: apsw.Connection, index: Path, *, readonly: bool) -> None:
    """Verify the file unless its stamp says it is unchanged since the last good check. A
    reader checks a large changed file no more (status does, with `check_now`); a writer
    always does, and a writer that finds a crashed sync's mark checks it whole."""
    stamp = _read_stamp(index)
    signature = _signature(index)
    if signature is None or stamp == signature:
        return
    if readonly:
        if stamp == SYNCING or int(signature.split()[0]) > READ_CHECK_MAX_BYTES:
            return  # a sync runs now (or crashed: the next sync checks), or the file is large
        verify(conn, index)
        return
    verify(conn, index, full=stamp == SYNCING)


def writes_begin(index: Path) -> None:
    """A sync's first write transaction begins: a crash from here on leaves the mark for the
    next sync to find."""
    _write_stamp(index, SYNCING)


def writes_end(index: Path) -> None:
    """A sync ended and closed the file (its last checkpoint included): stamp it as verified,
    unless the stamp says so already (a sync that wrote nothing)."""
    signature = _signature(index)
    if signature is not None and _read_stamp(index) != signature:
        _write_stamp(index, signature)
