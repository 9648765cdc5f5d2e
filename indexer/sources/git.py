"""Git source driver: a read-only bare mirror per source, indexed by diffing trees.

Network vs local
    Everything that talks to the remote (`ls-remote`, `clone --mirror`, `fetch`) runs the
    `git` command line, because only git itself honours the user's whole setup: ssh-agent,
    ~/.ssh/config (Host aliases, IdentityFile, ProxyJump, ControlMaster), GIT_SSH_COMMAND /
    core.sshCommand, credential helpers (libsecret, osxkeychain, store, cache, GCM), url.insteadOf,
    http.proxy and CA settings. libgit2 would need our own credential callbacks and still miss
    most of that. Everything local (refs, diffs, blobs, commit times) uses pygit2, in process.

What credentials work
    Git runs without a terminal (its own session, stdin closed, GIT_TERMINAL_PROMPT=0), so it
    can never hang on a prompt in cron or a hook: ssh keys via the agent or without passphrase,
    known hosts already accepted once (`ssh -T host` by hand), https through a credential helper.
    Anything that would need typing fails fast and becomes a one-line SourceError naming the
    source and the url (a password embedded in the url is masked in messages). Every call has
    a timeout and the whole process group (git and its ssh) is killed when it expires.

Mirror
    `source.mirror` is our cache: created with `clone --mirror --no-local` (no hardlinks into a
    local upstream), refreshed with `fetch --prune --force <url> +refs/*:refs/*` (the url always
    comes from the config, the mirror's `origin` is not consulted). Our fetch passes
    `-c core.hooksPath=/dev/null` so the mirror's reference-transaction hook does not start a
    second sync while we index in process. Nothing is ever written upstream and no working tree
    is checked out. A mirror that is not a valid repository, or is damaged (a fetch that fails
    on corrupt or missing objects while the remote answers, or objects that cannot be read while
    indexing, `show` or `grep`: MirrorDamaged, or DAMAGE_MARK left for the next sync), is cloned
    again into a temporary sibling that is swapped in by a rename only once complete, so the old
    mirror stays usable until then; hooks installed in it are carried over. A failure that may be the network (the remote does not answer) never
    causes a clone. Only a folder that looks like a git directory or is empty is replaced;
    anything else (a folder with other files, a working tree, a bare repository that is not a
    mirror) raises SourceError and is left untouched.

Reading the mirror in process (heads, the tree diff of `changes`, blobs, commit times) is
`indexer.sources.git_tree`; its public names are named here too, so the driver stays one module
to its callers.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import glob
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pygit2

from indexer.config import GitSource
from indexer.errors import SourceError
from indexer.gitenv import git_environment
from indexer.paths import local_repository_path
from indexer.sources.git_tree import (
    DAMAGE_MARK,
    MirrorDamaged,
    branch_head,
    changes,
    entry_kind,
    find_commit,
    is_ancestor,
    last_change_times,
    left_out,
    mark_damaged,
    marked_damage,
    meta_files,
    mirror_head,
    open_bare,
    open_mirror,
    read_blob,
    source_error,
    source_message,
    tree_paths,
)

# The driver as its callers use it: the mirror kept here, and the reading half's functions.
__all__ = [
    "DAMAGE_MARK",
    "STATUS_REMOTE_TIMEOUT",
    "GitFailed",
    "MirrorDamaged",
    "changes",
    "entry_kind",
    "is_ancestor",
    "last_change_times",
    "left_out",
    "mark_damaged",
    "meta_files",
    "mirror_damage",
    "mirror_head",
    "note_git_failure",
    "read_blob",
    "reclone",
    "remote_head",
    "remote_heads",
    "remove_mirror",
    "sync_mirror",
    "tree_paths",
    "update_mirror",
]

LS_REMOTE_TIMEOUT = 60.0  # seconds; one round trip
# when someone waits on the answer (`status`, an agent's too): a remote that does not answer
# is said to, and the mirror's head stands in
STATUS_REMOTE_TIMEOUT = 10.0
TRANSFER_TIMEOUT = 900.0  # seconds; a first clone of a large notes repository over a slow link

_log = logging.getLogger("notes_search.git")

# Entries a bare repository may hold; a folder with anything else is not ours to delete.
_GIT_DIR_ENTRIES = frozenset(
    {
        "HEAD",
        "config",
        "description",
        "hooks",
        "info",
        "objects",
        "refs",
        "packed-refs",
        "FETCH_HEAD",
        "ORIG_HEAD",
        "logs",
        "branches",
        "shallow",
        "gc.log",
        "gc.pid",
        "commondir",
        "modules",
        "worktrees",
        "notes-search-damaged",
    }
)


# Lines git prints when the objects of the repository it works on are broken. Lines from the
# other side ("remote: ...") never count: those are the remote's own trouble.
_DAMAGE_MARKERS = (
    "inflate:",
    "is corrupt",
    "corrupt loose",
    "bad object",
    "unable to read",
    "checksum mismatch",
    "did not send all necessary objects",
    "missing blob",
    "missing tree",
    "missing commit",
    "broken link",
    "unable to unpack",
    "packfile",
    "invalid sha1 pointer",
)


class GitFailed(SourceError):
    """A git command failed; `stderr` is everything it said, for telling damage from the network."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


# ---------------------------------------------------------------------------------- network


def _reason(stderr: str, returncode: int) -> str:
    """The first line git printed that is not a warning or hint (ssh's own error comes first)."""
    for line in stderr.splitlines():
        line = line.strip()
        if line and not line.startswith(("warning:", "hint:")):
            return line
    return f"git exited with status {returncode}"


def _run_git(source: GitSource, args: list[str], *, timeout: float, what: str) -> str:
    """Run git detached from any terminal; output goes to files because an ssh ControlPersist
    master inherits stderr and would keep a pipe open long after git exited."""
    env = git_environment()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                ["git", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise source_error(source, what, f"cannot run git: {exc}") from None
        started = getattr(_asking, "procs", None)
        if started is not None:
            started.append(proc)
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise source_error(source, what, f"timed out after {timeout:g} s") from None
        except BaseException:  # Ctrl-C: git runs in its own session and would outlive us
            _kill_group(proc)
            raise
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    if returncode != 0:
        raise GitFailed(source_message(source, what, _reason(stderr, returncode)), stderr)
    return stdout


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _remote_branch(source: GitSource, timeout: float | None = None) -> tuple[str | None, str]:
    """(ref name, commit) of the branch to index on the remote, from one ls-remote round trip.

    The ref name is None only when the remote's HEAD is detached.
    """
    timeout = timeout or LS_REMOTE_TIMEOUT
    if source.branch:
        ref = f"refs/heads/{source.branch}"
        out = _run_git(source, ["ls-remote", "--", source.url, ref], timeout=timeout, what="ls-remote")
        for line in out.splitlines():
            rev, _, name = line.partition("\t")
            if name == ref:
                return ref, rev
        raise source_error(source, "ls-remote", f"branch {source.branch!r} not found on the remote")
    out = _run_git(source, ["ls-remote", "--symref", "--", source.url, "HEAD"], timeout=timeout, what="ls-remote")
    symref: str | None = None
    for line in out.splitlines():
        left, _, name = line.partition("\t")
        if name != "HEAD":
            continue
        if left.startswith("ref: "):
            symref = left.removeprefix("ref: ")
        else:
            return symref, left
    raise source_error(source, "ls-remote", _headless(source, symref, timeout))


SHOWN_BRANCHES = 5  # named in the message about a remote HEAD that names no branch


def _headless(source: GitSource, symref: str | None, timeout: float) -> str:
    """Why the remote's HEAD gives no commit: an empty repository, or a HEAD naming a branch
    that does not exist (a default branch renamed or deleted on a bare upstream), which the
    source's `branch:` key works around."""
    out = _run_git(source, ["ls-remote", "--heads", "--", source.url], timeout=timeout, what="ls-remote")
    branches = [name.removeprefix("refs/heads/") for _, _, name in (line.partition("\t") for line in out.splitlines())]
    branches = [name for name in branches if name]
    if not branches:
        return "the remote has no commits (empty repository?)"
    # git 2.39 lists no symref for such a HEAD; later ones (protocol v2's "unborn") may
    named = f"branch {symref.removeprefix('refs/heads/')!r}" if symref else "a branch"
    shown = ", ".join(branches[:SHOWN_BRANCHES]) + (", …" if len(branches) > SHOWN_BRANCHES else "")
    return (
        f"the remote's HEAD names {named}, which does not exist; set `branch:` for this source "
        f"(sources.git.{source.id}.branch) to one of its branches: {shown}"
    )


def remote_heads(sources: list[GitSource], timeout: float | None = None) -> dict[str, str | SourceError]:
    """Each source's `remote_head`, or why it is unknown: asked all at once, so that the
    remotes that do not answer cost one timeout, not one each."""
    heads: dict[str, str | SourceError] = {}
    started: list[subprocess.Popen[bytes]] = []  # the helper threads' git processes

    def ask(source: GitSource) -> None:
        _asking.procs = started
        heads[source.id] = _asked(source, timeout)

    threads = [threading.Thread(target=ask, args=(source,), daemon=True) for source in sources[1:]]
    try:
        for thread in threads:
            thread.start()
        if sources:
            heads[sources[0].id] = _asked(sources[0], timeout)
        for thread in threads:
            thread.join()
    except BaseException:  # Ctrl-C: their git runs in its own session and would outlive us
        for proc in list(started):
            if proc.poll() is None:
                _kill_group(proc)
        raise
    return heads


def _asked(source: GitSource, timeout: float | None) -> str | SourceError:
    try:
        return remote_head(source, timeout)
    except SourceError as exc:
        return exc


_asking = threading.local()  # `procs`: where a thread asking remotes for `remote_heads` notes its git


def remote_head(source: GitSource, timeout: float | None = None) -> str:
    """The commit the remote's branch points to, without fetching (cheap change detection)."""
    return _remote_branch(source, timeout)[1]


def _is_mirror(repo: pygit2.Repository) -> bool:
    """Made by `clone --mirror` (ours), not a bare repository the user pushes to."""
    try:
        return repo.config.get_bool("remote.origin.mirror")
    except (KeyError, pygit2.GitError):
        return False


def _broken_mirror(source: GitSource) -> bool:
    """What is at the mirror path when it does not open as a repository: True for a broken
    mirror, False for nothing or an empty folder; refuses anything that does not look like one."""
    path = source.mirror
    if not path.exists() and not path.is_symlink():
        return False
    if path.is_dir() and not path.is_symlink():
        names = {n for n in os.listdir(path) if not n.endswith(".lock")}
        if not names:
            return False
        if names <= _GIT_DIR_ENTRIES and names & {"HEAD", "objects", "refs"}:
            return True
    raise source_error(
        source,
        "mirror",
        f"{path} exists but is not a bare git mirror; refusing to replace it (move it away or change `mirror:`)",
    )


def _leftovers(path: Path) -> list[Path]:
    """Temporary siblings of a mirror (a clone in progress or an old mirror being removed)."""
    return list(path.parent.glob(f".{glob.escape(path.name)}.*.clone"))


def _clone(source: GitSource) -> None:
    """clone --mirror into a temporary sibling, then rename it into place: an interrupted clone
    leaves no half-filled mirror behind, and a mirror being replaced stays until the new one is
    complete (a killed re-clone leaves it in place plus a temporary folder the next sync removes)."""
    path = source.mirror
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".clone", dir=path.parent))
    except OSError as exc:  # the mirrors' folder is ours to write; say so instead of a traceback
        raise source_error(
            source, "mirror", f"cannot create a mirror in {path.parent}: {exc.strerror or exc}"
        ) from None
    try:
        _run_git(
            source,
            [
                "-c",
                "core.hooksPath=/dev/null",
                "clone",
                "--mirror",
                "--no-local",
                "--quiet",
                "--",
                source.url,
                str(tmp),
            ],
            timeout=TRANSFER_TIMEOUT,
            what="clone --mirror",
        )
        if path.is_dir() and not path.is_symlink():
            _carry_hooks(source, path, tmp)
            # libgit2 shares open pack files by path, and the new pack may bear the old one's
            # name: repositories closed but not yet collected (pygit2 keeps them in reference
            # cycles) must let go of the old packs before anything opens the new mirror
            gc.collect()
            _swap(tmp, path)  # tmp now holds the old mirror
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _carry_hooks(source: GitSource, old: Path, new: Path) -> None:
    """Hooks installed in the mirror being replaced (`hooks install`) keep working in the new one."""
    try:
        entries = [
            e for e in os.scandir(old / "hooks") if not e.name.endswith(".sample") and e.is_file(follow_symlinks=False)
        ]
    except OSError:
        return
    for entry in entries:
        try:
            shutil.copy2(entry.path, new / "hooks" / entry.name)
        except OSError as exc:
            _log.warning("git source %s: cannot carry hook %s into the new mirror: %s", source.id, entry.name, exc)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _swap(new: Path, path: Path) -> None:
    """Put folder `new` at `path` and the folder that was at `path` at `new`. Atomic where the
    kernel exchanges names (Linux renameat2); elsewhere two renames, and a kill between them
    leaves no mirror at `path`, which the next sync simply clones."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        renameat2 = None
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), str(path))
    aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".clone", dir=path.parent))
    os.rename(path, aside)  # onto an empty folder: allowed
    os.rename(new, path)
    os.rename(aside, new)


def note_git_failure(source: GitSource, stderr: str) -> str | None:
    """For a git command run in the mirror outside this module (`git grep`): when what it printed
    says the mirror's own objects are broken, mark the mirror damaged and return that line."""
    line = _damage_line(stderr)
    if line is not None:
        mark_damaged(source, line)
    return line


def _damage_line(stderr: str) -> str | None:
    """The first line git printed about broken objects of the repository it works on."""
    for line in stderr.splitlines():
        line = line.strip()
        if not line.lower().startswith("remote:") and any(m in line.lower() for m in _DAMAGE_MARKERS):
            return line
    return None


def _local_damage(source: GitSource) -> str | None:
    """What a connectivity check finds broken in the mirror (commits and trees), or None."""
    try:
        _run_git(
            source,
            ["--git-dir", str(source.mirror), "fsck", "--connectivity-only", "--no-dangling", "--no-progress"],
            timeout=TRANSFER_TIMEOUT,
            what="fsck",
        )
    except GitFailed as exc:
        return _reason(exc.stderr, 1)
    return None


def _damage(source: GitSource, failed: GitFailed) -> str | None:
    """Why a failed fetch means a broken mirror, or None if it may be the remote or the network.

    Only when the remote answers an ls-remote now is the mirror suspected: an unreachable
    remote must never cost a clone (which would fail anyway).
    """
    try:
        _run_git(source, ["ls-remote", "--", source.url, "HEAD"], timeout=LS_REMOTE_TIMEOUT, what="ls-remote")
    except SourceError:
        return None
    found = _local_damage(source)
    if found is not None:
        return found
    return _damage_line(failed.stderr)


def reclone(source: GitSource, reason: str) -> str:
    """Replace a damaged mirror with a fresh clone (the old one stays until the new is complete);
    returns the branch head in it. A clone that fails keeps the old mirror and says both why."""
    _log.warning("git source %s: mirror %s is damaged (%s): cloning it again", source.id, source.mirror, reason)
    try:
        _clone(source)
    except GitFailed as exc:
        raise source_error(
            source,
            "mirror",
            f"{source.mirror} is damaged ({reason}) and cloning it again failed: {_reason(exc.stderr, 1)}",
        ) from None
    _log.info("git source %s: mirror %s cloned again", source.id, source.mirror)
    return branch_head(source, open_mirror(source))


def sync_mirror(source: GitSource) -> str:
    """Create or refresh the mirror and return the commit of the selected branch in it."""
    return update_mirror(source)[0]


def update_mirror(source: GitSource) -> tuple[str, str | None]:
    """Create or refresh the mirror: (commit of the selected branch, why the mirror had to be
    cloned again, or None). A first clone is not a re-clone."""
    local = local_repository_path(source.url)
    if local is not None and local.resolve() == source.mirror.resolve():
        raise source_error(source, "mirror", "the mirror path is the upstream repository itself")
    # a re-clone killed after its clone or its swap left a full copy behind (we hold the lock)
    for leftover in _leftovers(source.mirror):
        shutil.rmtree(leftover, ignore_errors=True)
    repo = open_bare(source.mirror)
    if repo is None:
        if _broken_mirror(source):
            return reclone(source, "not a valid git repository"), "not a valid git repository"
        _clone(source)  # clone --mirror sets HEAD to the remote's default branch
        return branch_head(source, open_mirror(source)), None
    if not _is_mirror(repo):
        raise source_error(
            source,
            "mirror",
            f"{source.mirror} is a bare repository but not a mirror "
            "(remote.origin.mirror unset); refusing to overwrite its refs",
        )
    marked = marked_damage(source)
    if marked is not None:  # a search or a read met broken objects that a fetch would not read
        repo.free()
        return reclone(source, marked), marked
    default_ref = None if source.branch else _remote_branch(source)[0]
    try:
        try:
            _fetch(source)
        except GitFailed as exc:
            if not _remove_stale_locks(source, exc.stderr):
                raise
            _fetch(source)
    except GitFailed as exc:
        damage = _damage(source, exc)
        if damage is None:
            raise
        repo.free()  # open packs are shared by path: the clone's must not be served from these
        return reclone(source, damage), damage
    # fetch never moves HEAD: follow a remote whose default branch changed
    if default_ref is not None and default_ref in repo.references and repo.references["HEAD"].target != default_ref:
        repo.set_head(default_ref)
    head = branch_head(source, repo)
    if find_commit(repo, head) is None:
        # refs survived but objects did not (a fetch that had nothing to update cannot notice)
        damage = f"commit {head} cannot be read"
        repo.free()
        return reclone(source, damage), damage
    return head, None


def _fetch(source: GitSource) -> None:
    _run_git(
        source,
        [
            "--git-dir",
            str(source.mirror),
            "-c",
            "core.hooksPath=/dev/null",
            "fetch",
            "--quiet",
            "--prune",
            "--force",
            "--",
            source.url,
            "+refs/*:refs/*",
        ],
        timeout=TRANSFER_TIMEOUT,
        what="fetch",
    )


_LOCKED_REF = re.compile(r"Unable to create '([^']+\.lock)': File exists")


def _remove_stale_locks(source: GitSource, stderr: str) -> bool:
    """Delete the ref locks a fetch was refused by when a killed git left them: inside the
    mirror (ours), and older than any fetch of ours runs (we hold the index lock, so none runs
    now). Every later sync failed with "cannot lock ref" until someone found the file.
    True when one was deleted (fetch again)."""
    mirror = source.mirror.resolve()
    removed = False
    for name in _LOCKED_REF.findall(stderr):
        path = Path(name)
        try:
            inside = path.resolve().is_relative_to(mirror)
            stale = inside and time.time() - path.lstat().st_mtime > TRANSFER_TIMEOUT
            if stale:
                path.unlink()
        except OSError:
            continue
        if stale:
            _log.warning("git source %s: deleted the stale lock %s a killed git left in the mirror", source.id, path)
            removed = True
    return removed


def remove_mirror(source: GitSource) -> bool:
    """Delete the source's mirror when it is ours (made by `clone --mirror`, or a broken one),
    with any leftover of an interrupted re-clone; False when there is none. Anything else at the
    path (a bare repository someone pushes to, a folder of files) raises SourceError, untouched."""
    for leftover in _leftovers(source.mirror):
        shutil.rmtree(leftover, ignore_errors=True)
    if source.mirror.is_symlink():
        raise source_error(source, "mirror", f"{source.mirror} is a symbolic link; not removing what it points to")
    repo = open_bare(source.mirror)
    if repo is None and not _broken_mirror(source):  # raises for what is not ours
        return False
    if repo is not None:
        mirror = _is_mirror(repo)
        repo.free()
        if not mirror:
            raise source_error(
                source, "mirror", f"{source.mirror} is a bare repository but not a mirror; not removing it"
            )
    shutil.rmtree(source.mirror)
    return True


def mirror_damage(source: GitSource) -> str | None:
    """A cheap look for damage (`status`): the damage a read marked (DAMAGE_MARK), else whether
    the mirror opens and its head commit and root tree read. None when they do or when there is
    no mirror; deeper damage shows when indexing or searching. Raises SourceError, as sync does,
    when what is at the mirror path is not ours to replace."""
    repo = open_bare(source.mirror)
    if repo is None:
        return "not a valid git repository" if _broken_mirror(source) else None
    marked = marked_damage(source)
    if marked is not None:
        return marked
    try:
        commit = find_commit(repo, branch_head(source, repo))
        if commit is None:
            return "its head commit cannot be read"
        len(commit.tree)
    except SourceError:
        return None  # a branch the next fetch brings
    except pygit2.GitError as exc:
        return str(exc)
    return None
