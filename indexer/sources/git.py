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

Change contract of `changes(source, old_rev, new_rev)`
    Incremental (old_rev is a commit present in the mirror, full=False): the exact tree diff
    old_rev -> new_rev. A tree diff compares two snapshots, so it is exact even when old_rev is
    not an ancestor; the sync still passes old_rev only when `is_ancestor(source, old_rev,
    new_rev)` (conservative after a force-push), and is_ancestor is False for a missing old_rev.
    Full (full=True, old_rev None, or old_rev not in the mirror, e.g. pruned by gc after a
    force-push or a re-cloned mirror): one Upsert per admitted, readable file of new_rev and no
    Deletes. The CALLER must then delete every indexed path of this source that is not in
    `tree_paths(source, new_rev)`.
    In both modes:
    - Upserts come first and Deletes after, so the content of a renamed file (Delete(old) +
      Upsert(new), same sha256) is still in the store when the new path arrives and its
      vectors can be reused by content hash.
    - A file whose new content cannot be indexed (binary, invalid UTF-8, too large, a Git LFS
      pointer) yields Delete(path) then Skipped(path, reason): no stale text survives, whatever
      the caller does with Skipped. Symlinks and submodules are never indexed: Skipped (the caller logs it).
    - FileSelection is applied to both sides: a file moved out of scope is a Delete, into scope an Upsert.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import glob
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pygit2
from pygit2.enums import DeltaStatus, FileMode, RepositoryOpenFlag, SortMode

from indexer.collections import is_utf8_name
from indexer.config import GitSource
from indexer.errors import FileNotAtRevision, SourceError
from indexer.filetext import LFS_POINTER_REASON, is_lfs_pointer
from indexer.gitenv import git_environment
from indexer.globs import FileSelection
from indexer.model import Change, Delete, FileVersion, Skipped, Upsert
from indexer.paths import local_repository_path
from indexer.redaction import redact

LS_REMOTE_TIMEOUT = 60.0  # seconds; one round trip
TRANSFER_TIMEOUT = 900.0  # seconds; a first clone of a large notes repository over a slow link

_log = logging.getLogger("notes_search.git")

_BLOB_MODES = frozenset({FileMode.BLOB, FileMode.BLOB_EXECUTABLE})

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

# Written into a mirror when a read meets broken objects that no fetch would notice (a blob in a
# corrupt pack that `grep` or `show` reads, while incremental syncs only read changed blobs):
# the next sync clones the mirror again and `status` reports it until then. It lives inside the
# mirror, so the re-clone that swaps the mirror out also removes it.
DAMAGE_MARK = "notes-search-damaged"


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


class MirrorDamaged(SourceError):
    """The mirror's own files are broken (a corrupt pack, missing objects): a fresh clone fixes it."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class GitFailed(SourceError):
    """A git command failed; `stderr` is everything it said, for telling damage from the network."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


# ---------------------------------------------------------------------------------- network


def _error(source: GitSource, what: str, reason: str) -> SourceError:
    """One line naming the source and url; an embedded password never reaches a log."""
    return SourceError(_message(source, what, reason))


def _message(source: GitSource, what: str, reason: str) -> str:
    return redact(" ".join(f"git source {source.id!r} ({source.url}): {what}: {reason}".split()), source.url)


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
            raise _error(source, what, f"cannot run git: {exc}") from None
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise _error(source, what, f"timed out after {timeout:g} s") from None
        except BaseException:  # Ctrl-C: git runs in its own session and would outlive us
            _kill_group(proc)
            raise
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    if returncode != 0:
        raise GitFailed(_message(source, what, _reason(stderr, returncode)), stderr)
    return stdout


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _remote_branch(source: GitSource) -> tuple[str | None, str]:
    """(ref name, commit) of the branch to index on the remote, from one ls-remote round trip.

    The ref name is None only when the remote's HEAD is detached.
    """
    if source.branch:
        ref = f"refs/heads/{source.branch}"
        out = _run_git(source, ["ls-remote", "--", source.url, ref], timeout=LS_REMOTE_TIMEOUT, what="ls-remote")
        for line in out.splitlines():
            rev, _, name = line.partition("\t")
            if name == ref:
                return ref, rev
        raise _error(source, "ls-remote", f"branch {source.branch!r} not found on the remote")
    out = _run_git(
        source, ["ls-remote", "--symref", "--", source.url, "HEAD"], timeout=LS_REMOTE_TIMEOUT, what="ls-remote"
    )
    symref: str | None = None
    for line in out.splitlines():
        left, _, name = line.partition("\t")
        if name != "HEAD":
            continue
        if left.startswith("ref: "):
            symref = left.removeprefix("ref: ")
        else:
            return symref, left
    raise _error(source, "ls-remote", _headless(source, symref))


SHOWN_BRANCHES = 5  # named in the message about a remote HEAD that names no branch


def _headless(source: GitSource, symref: str | None) -> str:
    """Why the remote's HEAD gives no commit: an empty repository, or a HEAD naming a branch
    that does not exist (a default branch renamed or deleted on a bare upstream), which the
    source's `branch:` key works around."""
    out = _run_git(source, ["ls-remote", "--heads", "--", source.url], timeout=LS_REMOTE_TIMEOUT, what="ls-remote")
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


def remote_head(source: GitSource) -> str:
    """The commit the remote's branch points to, without fetching (cheap change detection)."""
    return _remote_branch(source)[1]


def _open(path: Path) -> pygit2.Repository | None:
    """The bare repository at exactly `path` (no search upwards into an enclosing repository)."""
    try:
        repo = pygit2.Repository(str(path), RepositoryOpenFlag.NO_SEARCH)
        repo.references["HEAD"]  # libgit2 opens a repository whose HEAD file is garbage
    except (KeyError, pygit2.GitError):
        return None
    return repo if repo.is_bare else None


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
    raise _error(
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
        raise _error(source, "mirror", f"cannot create a mirror in {path.parent}: {exc.strerror or exc}") from None
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


def mark_damaged(source: GitSource, reason: str) -> None:
    """Record that the mirror's objects are broken (see DAMAGE_MARK). Best effort: a reader that
    may not write the mirror (another user's MCP server) still reports the error it met."""
    path = source.mirror
    if not path.is_dir() or path.is_symlink():
        return
    line = " ".join(reason.split())[:500] or "objects cannot be read"
    try:
        (path / DAMAGE_MARK).write_text(line + "\n", encoding="utf-8")
    except OSError as exc:
        _log.warning("git source %s: cannot mark mirror %s as damaged: %s", source.id, path, exc.strerror or exc)
        return
    _log.warning("git source %s: mirror %s is damaged (%s): the next sync clones it again", source.id, path, line)


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


def marked_damage(source: GitSource) -> str | None:
    """Why a read marked the mirror damaged, or None (no mark, or it cannot be read)."""
    try:
        text = (source.mirror / DAMAGE_MARK).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text.strip() or "objects cannot be read"


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
        raise _error(
            source,
            "mirror",
            f"{source.mirror} is damaged ({reason}) and cloning it again failed: {_reason(exc.stderr, 1)}",
        ) from None
    _log.info("git source %s: mirror %s cloned again", source.id, source.mirror)
    return _branch_head(source, _mirror(source))


def sync_mirror(source: GitSource) -> str:
    """Create or refresh the mirror and return the commit of the selected branch in it."""
    return update_mirror(source)[0]


def update_mirror(source: GitSource) -> tuple[str, str | None]:
    """Create or refresh the mirror: (commit of the selected branch, why the mirror had to be
    cloned again, or None). A first clone is not a re-clone."""
    local = local_repository_path(source.url)
    if local is not None and local.resolve() == source.mirror.resolve():
        raise _error(source, "mirror", "the mirror path is the upstream repository itself")
    # a re-clone killed after its clone or its swap left a full copy behind (we hold the lock)
    for leftover in _leftovers(source.mirror):
        shutil.rmtree(leftover, ignore_errors=True)
    repo = _open(source.mirror)
    if repo is None:
        if _broken_mirror(source):
            return reclone(source, "not a valid git repository"), "not a valid git repository"
        _clone(source)  # clone --mirror sets HEAD to the remote's default branch
        return _branch_head(source, _mirror(source)), None
    if not _is_mirror(repo):
        raise _error(
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
    except GitFailed as exc:
        damage = _damage(source, exc)
        if damage is None:
            raise
        repo.free()  # open packs are shared by path: the clone's must not be served from these
        return reclone(source, damage), damage
    # fetch never moves HEAD: follow a remote whose default branch changed
    if default_ref is not None and default_ref in repo.references and repo.references["HEAD"].target != default_ref:
        repo.set_head(default_ref)
    head = _branch_head(source, repo)
    if _commit(repo, head) is None:
        # refs survived but objects did not (a fetch that had nothing to update cannot notice)
        damage = f"commit {head} cannot be read"
        repo.free()
        return reclone(source, damage), damage
    return head, None


def remove_mirror(source: GitSource) -> bool:
    """Delete the source's mirror when it is ours (made by `clone --mirror`, or a broken one),
    with any leftover of an interrupted re-clone; False when there is none. Anything else at the
    path (a bare repository someone pushes to, a folder of files) raises SourceError, untouched."""
    for leftover in _leftovers(source.mirror):
        shutil.rmtree(leftover, ignore_errors=True)
    if source.mirror.is_symlink():
        raise _error(source, "mirror", f"{source.mirror} is a symbolic link; not removing what it points to")
    repo = _open(source.mirror)
    if repo is None and not _broken_mirror(source):  # raises for what is not ours
        return False
    if repo is not None:
        mirror = _is_mirror(repo)
        repo.free()
        if not mirror:
            raise _error(source, "mirror", f"{source.mirror} is a bare repository but not a mirror; not removing it")
    shutil.rmtree(source.mirror)
    return True


def mirror_damage(source: GitSource) -> str | None:
    """A cheap look for damage (`status`): the damage a read marked (DAMAGE_MARK), else whether
    the mirror opens and its head commit and root tree read. None when they do or when there is
    no mirror; deeper damage shows when indexing or searching. Raises SourceError, as sync does,
    when what is at the mirror path is not ours to replace."""
    repo = _open(source.mirror)
    if repo is None:
        return "not a valid git repository" if _broken_mirror(source) else None
    marked = marked_damage(source)
    if marked is not None:
        return marked
    try:
        commit = _commit(repo, _branch_head(source, repo))
        if commit is None:
            return "its head commit cannot be read"
        len(commit.tree)
    except SourceError:
        return None  # a branch the next fetch brings
    except pygit2.GitError as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def _reading(source: GitSource) -> Iterator[pygit2.Repository]:
    """The mirror, opened for one operation. Objects that cannot be read (a corrupt pack, a
    missing object) mean a damaged mirror; its handles are released at once, because libgit2
    shares open pack files by path and would serve the damaged pack to a re-cloned mirror."""
    repo = _mirror(source)
    try:
        yield repo
    except pygit2.GitError as exc:
        repo.free()
        gc.collect()  # and closed ones (in reference cycles): a long-lived process reads a re-clone
        mark_damaged(source, str(exc))  # `show` meets it too: the next sync clones again
        raise MirrorDamaged(_message(source, "mirror", f"{source.mirror} is damaged: {exc}"), str(exc)) from None


# ------------------------------------------------------------------------------------ local


def _mirror(source: GitSource) -> pygit2.Repository:
    repo = _open(source.mirror)
    if repo is None:
        raise _error(source, "mirror", f"no mirror at {source.mirror} (run sync first)")
    return repo


def _branch_head(source: GitSource, repo: pygit2.Repository) -> str:
    name = f"refs/heads/{source.branch}" if source.branch else "HEAD"
    try:
        return str(repo.references[name].resolve().target)
    except (KeyError, pygit2.GitError):
        what = f"branch {source.branch!r}" if source.branch else "HEAD (no commits?)"
        raise _error(source, "mirror", f"{what} not found in {source.mirror}") from None


def mirror_head(source: GitSource) -> str | None:
    """The commit of the selected branch in the existing mirror (no network); None if there is
    no mirror, or it is marked damaged: that mirror is no base for "nothing changed"."""
    repo = _open(source.mirror)
    if repo is None or marked_damage(source) is not None:
        return None
    return _branch_head(source, repo)


def _commit(repo: pygit2.Repository, rev: str | pygit2.Oid) -> pygit2.Commit | None:
    try:
        obj = repo.get(rev) if isinstance(rev, pygit2.Oid) else repo.revparse_single(rev)
        return None if obj is None else obj.peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def is_ancestor(source: GitSource, old_rev: str, new_rev: str) -> bool:
    """May the index move from old_rev to new_rev incrementally? False after a force-push that
    rewrote old_rev away, or when old_rev is no longer in the mirror."""
    with _reading(source) as repo:
        new = _commit(repo, new_rev)
        if new is None:
            raise _error(source, "mirror", f"revision {new_rev} not found in {source.mirror}")
        old = _commit(repo, old_rev)
        return old is not None and (old.id == new.id or repo.descendant_of(new.id, old.id))


def _relevant(scope: FileSelection, path: str, mode: int) -> bool:
    """Does this tree entry concern the source? Submodules count when their folder is in scope,
    so a user sees in the log that notes inside one are not followed."""
    if not is_utf8_name(path):
        _log.warning("skipping %r: its name is not valid UTF-8", path)
        return False
    if mode == FileMode.COMMIT:
        return scope.may_contain(path)
    return scope.admits(path)


def _entries(tree: pygit2.Tree, scope: FileSelection, prefix: str = "") -> Iterator[tuple[str, pygit2.Oid, int]]:
    """(path, oid, mode) of every relevant non-tree entry, pruning folders the scope excludes."""
    for entry in tree:
        if entry.name is None:  # only a tree's own root has no name
            continue
        path = prefix + entry.name
        if entry.filemode == FileMode.TREE:
            if isinstance(entry, pygit2.Tree) and scope.may_contain(path):
                yield from _entries(entry, scope, path + "/")
        elif _relevant(scope, path, entry.filemode):
            yield path, entry.id, entry.filemode


def tree_paths(source: GitSource, rev: str) -> set[str]:
    """Admitted regular files of `rev`: in the full contract, everything else indexed goes."""
    with _reading(source) as repo:
        commit = _commit(repo, rev)
        if commit is None:
            raise _error(source, "mirror", f"revision {rev} not found in {source.mirror}")
        return {path for path, _, mode in _entries(commit.tree, source.selection) if mode in _BLOB_MODES}


def _blob_id(tree: pygit2.Tree, path: str) -> pygit2.Oid | None:
    try:
        return tree[path].id
    except KeyError:
        return None


def _introduced(commit: pygit2.Commit, wanted: dict[str, pygit2.Oid]) -> list[str]:
    """Paths whose wanted blob appears in `commit` and in none of its parents.

    Matching the final blob (not "any change") skips side-branch edits a merge discarded,
    and a merge that is identical to one parent introduces nothing, as in `git log -- path`.
    """
    if not commit.parents:
        return [p for p, oid in wanted.items() if _blob_id(commit.tree, p) == oid]
    first, *others = commit.parents
    found = [
        d.new_file.path
        for d in first.tree.diff_to_tree(commit.tree).deltas
        if wanted.get(d.new_file.path) == d.new_file.id
    ]
    for parent in others:
        found = [p for p in found if _blob_id(parent.tree, p) != wanted[p]]
    return found


def last_change_times(
    repo: pygit2.Repository,
    rev: str | pygit2.Oid,
    paths: Iterable[str],
    *,
    since: str | pygit2.Oid | None = None,
) -> dict[str, float]:
    """Commit time of the commit that gave each path its content at `rev` (recency ranking).

    Walks newest first and stops once every path is assigned. With `since` (the previously
    indexed commit) only the new commits are walked first; paths whose content came from older
    history (a force-push back to old content) continue into the full history. Paths still
    unassigned (shallow history) get the commit time of `rev`.
    """
    head = _commit(repo, rev)
    if head is None:
        raise KeyError(f"revision {rev} not found")
    wanted = {p: oid for p in paths if (oid := _blob_id(head.tree, p)) is not None}
    times: dict[str, float] = {}
    seen: set[pygit2.Oid] = set()
    for hide in ([since] if since is not None else []) + [None]:
        walker = repo.walk(head.id, SortMode.TIME)
        if hide is not None:
            walker.hide(hide)
        for commit in walker:
            if not wanted:
                break
            if commit.id in seen:
                continue
            seen.add(commit.id)
            for path in _introduced(commit, wanted):
                times[path] = float(commit.commit_time)
                del wanted[path]
    times.update(dict.fromkeys(wanted, float(head.commit_time)))
    return times


def _read(
    repo: pygit2.Repository, path: str, oid: pygit2.Oid, updated_at: float, max_file_bytes: int
) -> FileVersion | str:
    """The file as text, or the reason it cannot be indexed."""
    _, size = repo.odb.read_header(oid)
    if size > max_file_bytes:
        return f"too large ({size} bytes > {max_file_bytes})"
    blob = repo.get(oid)
    if blob is None:
        raise pygit2.GitError(f"object {oid} ({path}) is missing")
    if not isinstance(blob, pygit2.Blob):
        raise pygit2.GitError(f"object {oid} ({path}) is not a blob")
    data = blob.data
    if b"\0" in data:
        return "binary"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid UTF-8"
    if is_lfs_pointer(data):
        return LFS_POINTER_REASON
    return FileVersion(
        path=path,
        text=text.removeprefix("\ufeff"),
        sha256=hashlib.sha256(data).hexdigest(),
        size=size,
        mtime=None,
        updated_at=updated_at,
    )


def changes(
    source: GitSource,
    old_rev: str | None,
    new_rev: str,
    *,
    full: bool = False,
    max_file_bytes: int = 5_000_000,
) -> Iterator[Change]:
    """What to apply to the index to move it from old_rev to new_rev (contract: module doc).
    Objects that cannot be read raise MirrorDamaged."""
    with _reading(source) as repo:
        yield from _changes(source, repo, old_rev, new_rev, full, max_file_bytes)


def _changes(
    source: GitSource,
    repo: pygit2.Repository,
    old_rev: str | None,
    new_rev: str,
    full: bool,
    max_file_bytes: int,
) -> Iterator[Change]:
    new = _commit(repo, new_rev)
    if new is None:
        raise _error(source, "diff", f"revision {new_rev} not found in {source.mirror}")
    old = None if full or old_rev is None else _commit(repo, old_rev)
    scope = source.selection

    arrivals: list[tuple[str, pygit2.Oid, int]] = []
    departures: list[str] = []
    if old is None:
        arrivals = list(_entries(new.tree, scope))
    else:
        # No rename detection: a rename already shows as DELETED old + ADDED new, which is
        # exactly the Delete + Upsert the store needs; find_similar would only spend time.
        for delta in old.tree.diff_to_tree(new.tree).deltas:
            before = None if delta.status == DeltaStatus.ADDED else delta.old_file
            after = None if delta.status == DeltaStatus.DELETED else delta.new_file
            if after is not None and _relevant(scope, after.path, after.mode):
                arrivals.append((after.path, after.id, after.mode))
            if (
                before is not None
                and before.mode in _BLOB_MODES
                and scope.admits(before.path)
                and (after is None or after.mode not in _BLOB_MODES)
            ):
                departures.append(before.path)

    blobs = [(path, oid) for path, oid, mode in arrivals if mode in _BLOB_MODES]
    times = last_change_times(repo, new.id, [path for path, _ in blobs], since=None if old is None else old.id)
    for path, oid in blobs:
        version = _read(repo, path, oid, times[path], max_file_bytes)
        if isinstance(version, FileVersion):
            yield Upsert(version)
        else:
            yield Delete(path)
            yield Skipped(path, version)
    for path, _, mode in arrivals:
        if mode not in _BLOB_MODES:
            kind = "submodule" if mode == FileMode.COMMIT else "symlink"
            yield Skipped(path, f"{kind} (not followed)")
    for path in departures:
        yield Delete(path)


def read_blob(source: GitSource, rev: str, path: str) -> bytes:
    """A file's bytes at `rev`, straight from the object database (for `show`)."""
    with _reading(source) as repo:
        commit = _commit(repo, rev)
        if commit is None:
            raise _error(source, "read", f"revision {rev} not found in {source.mirror}")
        try:
            entry = commit.tree[path]
        except KeyError:
            raise FileNotAtRevision(_message(source, "read", f"{path} not found at {rev}")) from None
        if entry.filemode not in _BLOB_MODES:
            raise _error(source, "read", f"{path} at {rev} is not a regular file")
        blob = repo.get(entry.id)
        if blob is None:
            raise pygit2.GitError(f"object {entry.id} ({path}) is missing")
        if not isinstance(blob, pygit2.Blob):
            raise pygit2.GitError(f"object {entry.id} ({path}) is not a blob")
        data: bytes = blob.data
        return data
