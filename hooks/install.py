"""Git hooks that re-index a git source when command-line git moves it, and the job they start.

Why hooks: `sync` polls (ls-remote, then fetch) and indexes in process; it runs its own fetches
with hooks off, and libgit2 never runs hooks. The hooks cover the other ways new commits arrive:
a `git fetch` / `git remote update` of a mirror by the user or cron (`reference-transaction` in
the mirror; git has no post-fetch hook), and a push into a local bare repository that a source
mirrors (`post-receive` there, opt-in with `--upstream`: it writes into the user's repository).

The scripts (`hooks/reference-transaction`, `hooks/post-receive`) get the notes-search
executable, the config, the source id and the log file baked in as single-quoted shell words,
so no path can run anything. They only start `notes-search hooks run --source ID` detached and
exit 0. That job, not `sync`, coalesces the calls: a fetch fires the hook once per ref, and a
fire during a running sync must still cause one more sync after it, while `sync` exits at once
when the lock is held. The job records the fire in a marker, lets one job per source debounce
it, then syncs while waiting for the lock (see `run_hook_job`).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from indexer.config import Config, GitSource
from indexer.errors import NotesSearchError
from indexer.gitenv import git_environment
from indexer.lock import SyncLock
from indexer.paths import local_repository_path

if TYPE_CHECKING:  # heavy modules load only when a hook is installed or its job runs
    import pygit2

    from indexer.embedders import Embedder

MARKER = "# notes-search managed hook"  # starts the second line of every script we write
TEMPLATES = Path(__file__).resolve().parent
DEBOUNCE_SECONDS = 1.0  # quiet time after the last fire before syncing (per-ref fires of one fetch)
POLL_SECONDS = 0.1  # how often a debouncing job looks at the marker
LOCK_WAIT_SECONDS = 3600.0  # a hook job waits this long for a running sync (a first full index)

log = logging.getLogger("notes_search.hooks")


class HookError(NotesSearchError):
    """A hook cannot be installed (no mirror yet, a foreign hook in the way, not a git source)."""


class HookWriteError(HookError):
    """Some hook files could not be written (a read-only or non-folder `hooks`); `written` holds
    the ones that were, since the other sources are still handled."""

    def __init__(self, message: str, written: list[Path]) -> None:
        super().__init__(message)
        self.written = written


# ---- install --------------------------------------------------------------------------------


def notes_search_executable() -> Path:
    """The console script of this installation, so a hook runs the same notes-search and venv."""
    beside = Path(sys.executable).with_name("notes-search")  # not resolved: keep the venv's bin/
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("notes-search")
    if found is None:
        raise HookError("cannot find the notes-search executable to put into the hooks")
    return Path(found).absolute()


def render(name: str, *, executable: Path, config_path: Path, source_id: str, log_path: Path) -> str:
    """The hook script `name` with every value baked in as one single-quoted shell word."""
    text = (TEMPLATES / name).read_text(encoding="utf-8")
    for placeholder, value in (
        ("@NOTES_SEARCH@", str(executable)),
        ("@CONFIG@", str(config_path)),
        ("@SOURCE_ID@", source_id),
        ("@LOG@", str(log_path)),
    ):
        if text.count(placeholder) != 1:
            raise HookError(f"hook template {TEMPLATES / name} must contain {placeholder} exactly once")
        text = text.replace(placeholder, shlex.quote(value))
    return text


def is_ours(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            head = [f.readline() for _ in range(3)]
    except OSError:
        return False
    return any(line.startswith(MARKER) for line in head)


def hooks_path_override(git_dir: Path) -> str | None:
    """core.hooksPath as git resolves it for `git_dir` (any config level): set, git ignores
    `<git_dir>/hooks` and our hook never runs."""
    proc = subprocess.run(
        ["git", "--git-dir", str(git_dir), "config", "--get", "core.hooksPath"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=git_environment(),
        check=False,
    )
    value = proc.stdout.strip()
    return value or None


def _open_bare(path: Path) -> pygit2.Repository | None:
    import pygit2
    from pygit2.enums import RepositoryOpenFlag

    try:
        repo = pygit2.Repository(str(path), RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError:
        return None
    return repo if repo.is_bare else None


def _local_upstream(source: GitSource) -> Path:
    """The bare repository a source's url names on this machine (push target with post-receive)."""
    path = local_repository_path(source.url)
    if path is None:
        raise HookError(
            f"source {source.id!r}: url {source.url} is not on this machine; install post-receive "
            "on the server that receives the pushes, or rely on the mirror hook and cron"
        )
    repo = _open_bare(path)
    if repo is None:
        raise HookError(
            f"source {source.id!r}: {path} is not a bare repository; post-receive only runs "
            "where pushes are received (commits made in a working copy fire no hook: use cron)"
        )
    return Path(repo.path)


def _git_sources(config: Config, source_ids: Sequence[str]) -> list[GitSource]:
    if not source_ids:
        found = [s for s in config.sources.values() if isinstance(s, GitSource)]
        if not found:
            raise HookError("no git sources configured: hooks are for git sources only")
        return found
    selected = []
    for source_id in source_ids:
        source = config.source(source_id)
        if not isinstance(source, GitSource):
            raise HookError(
                f"source {source_id!r} is a workspace source: hooks are for git sources only "
                "(`watch` or the cron sync keep workspaces current)"
            )
        selected.append(source)
    return selected


def install_hooks(
    config: Config,
    source_ids: Sequence[str],
    *,
    upstream: bool = False,
    executable: Path | None = None,
) -> list[Path]:
    """Install reference-transaction into the mirror of each selected git source (all by default),
    and with `upstream` post-receive into its local bare upstream. Returns the files written.

    Everything is checked before anything is written: a missing mirror or a hook file that is
    not ours (no MARKER line) fails the whole install, naming the file.
    """
    if config.path is None:
        raise HookError("hooks need the config file's path (the config was not loaded from a file)")
    config_path = config.path.absolute()
    exe = (executable or notes_search_executable()).absolute()
    targets: list[tuple[Path, str]] = []
    for source in _git_sources(config, source_ids):
        mirror = _open_bare(source.mirror)
        if mirror is None:
            _no_mirror(source)
        targets.append((Path(mirror.path) / "hooks" / "reference-transaction", source.id))
        if upstream:
            targets.append((_local_upstream(source) / "hooks" / "post-receive", source.id))
    for path, _ in targets:
        if (path.exists() or path.is_symlink()) and not is_ours(path):
            raise HookError(
                f"{path} exists and was not written by notes-search; refusing to replace it. "
                "Move it away (or call it from your own hook) and install again"
            )
    config.log.parent.mkdir(parents=True, exist_ok=True)  # the hooks append their job's output to the log
    written = []
    failures = []
    for path, source_id in targets:
        text = render(path.name, executable=exe, config_path=config_path, source_id=source_id, log_path=config.log)
        try:
            _write_executable(path, text)
        except OSError as exc:  # one mirror's hooks folder must not keep the others' hooks out
            failures.append(_write_failure(path, exc))
            continue
        written.append(path)
    if failures:
        raise HookWriteError("; ".join(failures), written)
    return written


def uninstall_hooks(config: Config, source_ids: Sequence[str], *, upstream: bool = False) -> list[Path]:
    """Delete the hooks `install_hooks` wrote for the selected git sources (all by default) and
    this config: in the mirrors, and with `upstream` in their local bare upstreams (the user's
    repository: post-receive there is the one file notes-search ever wrote into it). A hook that
    is not ours, or is ours for another config or source, stays. Returns the files deleted."""
    sources = _git_sources(config, source_ids)
    places = [
        hook
        for source in sources
        for hook in (
            source.mirror / "hooks" / "reference-transaction",
            upstream_hook(config, source) if upstream else None,
        )
        if hook is not None and _installed_for(hook, config, source.id)
    ]
    removed, failures = [], []
    for path in places:  # (an upstream that is a URL or a working copy has none to remove)
        try:
            path.unlink()
        except OSError as exc:
            failures.append(f"cannot delete {path}: {exc.strerror or exc}")
            continue
        removed.append(path)
    if failures:
        raise HookWriteError("; ".join(failures), removed)
    return removed


def upstream_hook(config: Config, source: GitSource) -> Path | None:
    """The post-receive hook notes-search installed for `source` in its local bare upstream, if
    there is one: `source remove` takes it away, or every later push would run it for nothing."""
    path = local_repository_path(source.url)
    repo = _open_bare(path) if path is not None else None
    if repo is None:
        return None
    hook = Path(repo.path) / "hooks" / "post-receive"
    return hook if _installed_for(hook, config, source.id) else None


def _installed_for(path: Path, config: Config, source_id: str) -> bool:
    """Ours (MARKER), and baked with this config and this source."""
    if not path.is_file() or path.is_symlink() or not is_ours(path):
        return False
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    config_path = config.path.absolute() if config.path is not None else None
    baked = (f"config={shlex.quote(str(config_path))}\n", f"source_id={shlex.quote(source_id)}\n")
    return config_path is not None and all(line in text for line in baked)


def _no_mirror(source: GitSource) -> NoReturn:
    """Why a source's mirror cannot take a hook, in the words sync would use for it."""
    from indexer.sources import git as git_source  # pygit2 and the git driver load only here

    damage = git_source.mirror_damage(source)  # SourceError (sync's refusal) for a path not ours
    if damage is not None:
        raise HookError(
            f"source {source.id!r}: the mirror {source.mirror} is damaged ({damage}); "
            f"`notes-search sync --source {source.id}` clones it again, then install"
        )
    raise HookError(
        f"source {source.id!r}: no mirror at {source.mirror} yet; run `notes-search sync --source {source.id}` first"
    )


def _write_failure(path: Path, exc: OSError) -> str:
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        return f"cannot write hook {path}: {folder} is not a folder"
    return f"cannot write hook {path}: {exc.strerror or exc}"


def _write_executable(path: Path, text: str) -> None:
    """Write via a temporary sibling and rename: git never runs a half-written hook."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- the job a hook starts ----------------------------------------------------------------------


def pending_marker(config: Config, source_id: str) -> Path:
    """Exists while a fire of this source's hook is not yet covered by a started sync."""
    return config.lock_path.parent / f".hook-{source_id}.pending"


def run_hook_job(
    config: Config,
    source_id: str,
    embedder_factory: Callable[[], Embedder],
    *,
    debounce: float = DEBOUNCE_SECONDS,
    lock_wait: float = LOCK_WAIT_SECONDS,
) -> int:
    """Record a fire, then (in at most one job per source) sync until no fire is pending.
    Returns how many syncs this job ran.

    A fire touches the marker. The job holding the per-source runner lock waits until the last
    touch is `debounce` seconds old, removes the marker, and syncs, waiting for the sync lock: a
    sync that starts after the marker was removed sees every ref moved before, so no fire is lost
    and a burst of fires costs one sync. A job that finds the runner lock taken just leaves its
    mark: the holder re-checks the marker after every sync and again after letting go.
    """
    from indexer.sync import run_sync

    def sync() -> None:
        log.info("hook: syncing source %s", source_id)
        report = run_sync(config, source_ids=[source_id], embedder_factory=embedder_factory, lock_timeout=lock_wait)
        if report.locked:
            log.warning(
                "hook: source %s not synced: another sync held the lock for %g s; the next sync picks the change up",
                source_id,
                lock_wait,
            )

    marker = pending_marker(config, source_id)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    runner = SyncLock(marker.with_suffix(".runner"))
    syncs = 0
    while marker.exists():
        if not runner.acquire():
            break
        try:
            syncs += _drain(marker, debounce, sync)
        finally:
            runner.release()
    return syncs


def _drain(marker: Path, debounce: float, sync: Callable[[], None]) -> int:
    """Sync each time the marker has been quiet for `debounce` seconds, until it stays gone."""
    syncs = 0
    seen: int | None = None
    seen_at = 0.0
    while True:
        try:
            stamp = marker.stat().st_mtime_ns
        except FileNotFoundError:
            return syncs
        now = time.monotonic()
        if stamp != seen:
            seen, seen_at = stamp, now
        # quiet = the last touch is `debounce` old; the monotonic bound ends the wait even if the
        # wall clock was stepped back and the marker's mtime lies in the future
        if time.time() - stamp / 1e9 < debounce and now - seen_at < debounce:
            time.sleep(min(POLL_SECONDS, debounce))
            continue
        marker.unlink(missing_ok=True)
        seen = None
        sync()
        syncs += 1
