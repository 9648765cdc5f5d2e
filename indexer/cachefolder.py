"""notes-search's cache folder: files that only save work, each safe to lose at any time.

Everything kept here can be computed again from what it was made of, so a reader checks what it
finds and treats a missing, cut-short or foreign file as absent; a folder that cannot be written
only costs the work each time. Files are written under a temporary name and renamed into place,
so a reader never sees half of one and two processes racing leave one whole file.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_folder() -> Path:
    """`$XDG_CACHE_HOME/notes-search`, else `~/.cache/notes-search`."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "notes-search"


def write_atomically(path: Path, data: bytes, *, durable: bool = True) -> None:
    """`data` as the file `path`, its folder made first. `durable` syncs it to the disk before the
    rename: worth it for a file that is expensive to make again, not for a small one whose
    reader checks it anyway (after a crash it is at worst made again)."""
    import tempfile  # only when a file is written, which most processes never do

    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
