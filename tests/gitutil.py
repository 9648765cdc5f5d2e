"""Build real git repositories for tests: pygit2 commits with explicit times, no working tree."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileMode


@dataclass(frozen=True)
class Symlink:
    target: str


@dataclass(frozen=True)
class Gitlink:
    """A submodule entry; the commit need not exist (git never follows it)."""

    commit: str = "1" * 40


Content = bytes | str | Symlink | Gitlink | None  # None deletes the path


def init_upstream(path: Path, branch: str = "main") -> pygit2.Repository:
    """A normal (non-bare) repository, like a user's notes repo."""
    return pygit2.init_repository(str(path), bare=False, initial_head=branch)


def commit(
    repo: pygit2.Repository,
    changes: dict[str, Content],
    *,
    time: int,
    branch: str = "main",
    parents: list[str] | None = None,
    message: str = "change",
) -> str:
    """Commit `changes` on top of the first parent (default: the branch tip) and force the
    branch to it, so rewriting history (a force-push) is just `parents=[older]`."""
    ref = f"refs/heads/{branch}"
    if parents is None:
        parents = [str(repo.references[ref].target)] if ref in repo.references else []
    index = pygit2.Index()
    if parents:
        index.read_tree(repo[parents[0]].peel(pygit2.Commit).tree)
    for path, content in changes.items():
        if content is None:
            index.remove(path)
        elif isinstance(content, Symlink):
            index.add(pygit2.IndexEntry(path, repo.create_blob(content.target.encode()), FileMode.LINK))
        elif isinstance(content, Gitlink):
            index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=content.commit), FileMode.COMMIT))
        else:
            data = content.encode() if isinstance(content, str) else content
            index.add(pygit2.IndexEntry(path, repo.create_blob(data), FileMode.BLOB))
    tree = index.write_tree(repo)
    sig = pygit2.Signature("Test", "test@example.com", time, 0)
    oid = repo.create_commit(None, sig, sig, message, tree, [pygit2.Oid(hex=p) for p in parents])
    repo.references.create(ref, oid, force=True)
    return str(oid)


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file below `root`: proves a repository was not written to."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }
