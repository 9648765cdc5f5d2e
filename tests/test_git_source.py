"""Git source driver against real repositories: an upstream served by path and by file:// url."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pygit2
import pytest

from indexer.config import GitSource
from indexer.errors import SourceError
from indexer.gitenv import git_environment
from indexer.globs import FileSelection
from indexer.model import Change, Delete, FileVersion, Skipped, Upsert
from indexer.paths import local_repository_path
from indexer.sources import git
from tests.gitutil import Gitlink, Symlink, commit, init_upstream, snapshot

T0 = 1_600_000_000  # explicit commit times, one day apart
DAY = 86_400


@pytest.fixture
def upstream(tmp_path: Path) -> pygit2.Repository:
    return init_upstream(tmp_path / "upstream")


def source_for(tmp_path: Path, url: str, *, branch: str | None = None, scope: FileSelection | None = None) -> GitSource:
    return GitSource(
        id="notes",
        url=url,
        mirror=tmp_path / "mirrors" / "notes.git",
        branch=branch,
        selection=scope or FileSelection(),
    )


def file_url(repo: pygit2.Repository) -> str:
    return Path(repo.workdir).as_uri()


def run(source: GitSource, old: str | None, new: str, **kw: object) -> list[Change]:
    return list(git.changes(source, old, new, **kw))  # type: ignore[arg-type]


def upserts(out: list[Change]) -> dict[str, FileVersion]:
    return {c.file.path: c.file for c in out if isinstance(c, Upsert)}


def deletes(out: list[Change]) -> set[str]:
    return {c.path for c in out if isinstance(c, Delete)}


def sync_index(index: dict[str, str], source: GitSource, old: str | None, new: str) -> list[Change]:
    """Apply changes the way indexer.sync does (path -> sha256), including the full contract."""
    incremental = old is not None and git.is_ancestor(source, old, new)
    out = run(source, old if incremental else None, new)
    for change in out:
        if isinstance(change, Upsert):
            index[change.file.path] = change.file.sha256
        elif isinstance(change, Delete):
            index.pop(change.path, None)
    if not incremental:
        present = git.tree_paths(source, new)
        for path in set(index) - present:
            del index[path]
    return out


def fresh_index(source: GitSource, rev: str) -> dict[str, str]:
    return {path: f.sha256 for path, f in upserts(run(source, None, rev)).items()}


# ---------------------------------------------------------------------------------- first index


def test_first_index_applies_scope_and_reads_blobs(tmp_path: Path, upstream: pygit2.Repository) -> None:
    scope = FileSelection(paths=("notes/**",), include=("*.md",), exclude=("notes/drafts/**",))
    bom = b"\xef\xbb\xbf# Kazan\n\nKreml.\n"
    rev = commit(
        upstream,
        {
            "top.md": "# outside paths\n",
            "other/x.md": "# subfolder outside paths\n",
            "notes/a.md": "# A\n\nŽluťoučký kůň.\n",
            "notes/deep/er/b.md": "# B\n",
            "notes/bom.md": bom,
            "notes/c.txt": "not markdown\n",
            "notes/drafts/d.md": "# excluded: exclude wins over paths\n",
        },
        time=T0,
    )
    source = source_for(tmp_path, str(upstream.workdir), scope=scope)
    assert git.sync_mirror(source) == rev

    out = run(source, None, rev)
    files = upserts(out)
    assert set(files) == {"notes/a.md", "notes/deep/er/b.md", "notes/bom.md"}
    assert all(isinstance(c, Upsert) for c in out)
    assert git.tree_paths(source, rev) == set(files)
    a = files["notes/a.md"]
    raw = "# A\n\nŽluťoučký kůň.\n".encode()
    assert (a.text, a.sha256, a.size, a.mtime) == (raw.decode(), hashlib.sha256(raw).hexdigest(), len(raw), None)
    assert a.updated_at == float(T0)
    assert files["notes/bom.md"].text == "# Kazan\n\nKreml.\n"  # BOM stripped from the text...
    assert files["notes/bom.md"].sha256 == hashlib.sha256(bom).hexdigest()  # ...but the hash is of the blob


def test_unreadable_files_are_deleted_then_skipped(tmp_path: Path, upstream: pygit2.Repository) -> None:
    rev = commit(
        upstream,
        {"bin.md": b"PK\x00\x03", "latin1.md": "café".encode("latin-1"), "big.md": "x" * 200, "ok.md": "# ok\n"},
        time=T0,
    )
    source = source_for(tmp_path, str(upstream.workdir))
    git.sync_mirror(source)
    out = run(source, None, rev, max_file_bytes=100)
    skipped = {c.path: c.reason for c in out if isinstance(c, Skipped)}
    assert skipped == {"bin.md": "binary", "latin1.md": "invalid UTF-8", "big.md": "too large (200 bytes > 100)"}
    # a few stray bytes in a long note read as U+FFFD: the rest of it stays searchable
    stray = b"# Kazan\n\n" + b"The Kremlin stands on the Volga.\n" * 5 + b"caf\xe9\n"
    rev = commit(upstream, {"stray.md": stray}, time=T0 + 1)
    git.sync_mirror(source)
    files = {c.file.path: c.file for c in run(source, None, rev, max_file_bytes=1000) if isinstance(c, Upsert)}
    assert files["stray.md"].text == stray[:-5].decode() + "caf\ufffd\n"
    for path in skipped:  # a stale older copy must not stay searchable
        assert out.index(Delete(path)) < out.index(next(c for c in out if isinstance(c, Skipped) and c.path == path))
    assert set(upserts(out)) == {"ok.md"}


def test_symlinks_and_submodules_are_skipped(tmp_path: Path, upstream: pygit2.Repository) -> None:
    """Skipped, not logged here: the sync logs each skip once (test_sync_logs_each_skip_once)."""
    rev1 = commit(upstream, {"a.md": "# A\n", "was-file.md": "# W\n", "vendor/lib/x.py": "x"}, time=T0)
    rev2 = commit(
        upstream,
        {
            "link.md": Symlink("a.md"),
            "notes-sub": Gitlink(),
            ".gitmodules": '[submodule "notes-sub"]\n\tpath = notes-sub\n\turl = ../sub\n',
            "was-file.md": Symlink("a.md"),  # type change: the indexed copy goes
        },
        time=T0 + DAY,
    )
    source = source_for(tmp_path, str(upstream.workdir))
    git.sync_mirror(source)

    full = run(source, None, rev2)
    assert upserts(full).keys() == {"a.md"}
    assert {c.path: c.reason for c in full if isinstance(c, Skipped)} == {
        "link.md": "symlink (not followed)",
        "was-file.md": "symlink (not followed)",
        "notes-sub": "submodule (not followed)",
    }
    assert git.tree_paths(source, rev2) == {"a.md"}

    inc = run(source, rev1, rev2)
    assert upserts(inc) == {}
    assert deletes(inc) == {"was-file.md"}
    assert {c.path for c in inc if isinstance(c, Skipped)} == {"link.md", "was-file.md", "notes-sub"}


# ------------------------------------------------------------------------------- incremental


def test_add_modify_delete_rename(tmp_path: Path, upstream: pygit2.Repository) -> None:
    rev1 = commit(
        upstream,
        {
            "keep.md": "# K\n",
            "edit.md": "# E1\n",
            "gone.md": "# G\n",
            "old-name.md": "# same content\n",
            "moved.md": "# M1\n",
        },
        time=T0,
    )
    rev2 = commit(
        upstream,
        {
            "new.md": "# N\n",
            "edit.md": "# E2\n",
            "gone.md": None,
            "old-name.md": None,
            "dir/new-name.md": "# same content\n",
            "moved.md": None,
            "dir/moved.md": "# M2\n",
        },
        time=T0 + DAY,
    )
    source = source_for(tmp_path, file_url(upstream))
    git.sync_mirror(source)
    index: dict[str, str] = {}
    sync_index(index, source, None, rev1)

    out = sync_index(index, source, rev1, rev2)
    assert set(upserts(out)) == {"new.md", "edit.md", "dir/new-name.md", "dir/moved.md"}
    assert deletes(out) == {"gone.md", "old-name.md", "moved.md"}
    kinds = [type(c) for c in out]
    assert kinds == sorted(kinds, key=lambda k: k is Delete)  # upserts first: vector reuse on rename
    same = hashlib.sha256(b"# same content\n").hexdigest()
    assert upserts(out)["dir/new-name.md"].sha256 == same
    assert index == fresh_index(source, rev2)
    assert run(source, rev2, rev2) == []


def test_moves_across_the_scope_boundary(tmp_path: Path, upstream: pygit2.Repository) -> None:
    scope = FileSelection(paths=("notes/**",), exclude=("notes/archive/**",))
    rev1 = commit(
        upstream,
        {"notes/out.md": "# O\n", "inbox/in.md": "# I\n", "notes/ext.md": "# X\n", "notes/arch.md": "# A\n"},
        time=T0,
    )
    rev2 = commit(
        upstream,
        {
            "notes/out.md": None,
            "elsewhere/out.md": "# O\n",
            "inbox/in.md": None,
            "notes/in.md": "# I\n",
            "notes/ext.md": None,
            "notes/ext.txt": "# X\n",
            "notes/arch.md": None,
            "notes/archive/arch.md": "# A\n",
        },
        time=T0 + DAY,
    )
    source = source_for(tmp_path, str(upstream.workdir), scope=scope)
    git.sync_mirror(source)
    out = run(source, rev1, rev2)
    assert set(upserts(out)) == {"notes/in.md"}
    assert deletes(out) == {"notes/out.md", "notes/ext.md", "notes/arch.md"}


def test_force_push_ends_in_a_correct_index(tmp_path: Path, upstream: pygit2.Repository) -> None:
    rev1 = commit(upstream, {"a.md": "# A1\n", "b.md": "# B\n"}, time=T0)
    rev2 = commit(upstream, {"a.md": "# A2\n", "c.md": "# C\n"}, time=T0 + DAY)
    source = source_for(tmp_path, str(upstream.workdir))
    git.sync_mirror(source)
    index: dict[str, str] = {}
    sync_index(index, source, None, rev2)

    # history rewritten: rev2 replaced by a sibling that drops b.md and brings a.md back to A1
    rewritten = commit(
        upstream, {"a.md": "# A1\n", "c.md": "# C2\n", "b.md": None, "d.md": "# D\n"}, time=T0 + 3 * DAY, parents=[rev1]
    )
    assert git.sync_mirror(source) == rewritten
    assert not git.is_ancestor(source, rev2, rewritten)
    expected = fresh_index(source, rewritten)
    assert set(expected) == {"a.md", "c.md", "d.md"}

    # what the sync does (full contract, as rev2 is not an ancestor)
    full_index = dict(index)
    sync_index(full_index, source, rev2, rewritten)
    assert full_index == expected
    # a tree diff from a non-ancestor that is still in the object database is exact as well
    diffed = dict(index)
    out = run(source, rev2, rewritten)
    for change in out:
        if isinstance(change, Upsert):
            diffed[change.file.path] = change.file.sha256
        elif isinstance(change, Delete):
            diffed.pop(change.path, None)
    assert diffed == expected
    # a.md's content dates from rev1, outside the new commits: found in the older history
    assert upserts(out)["a.md"].updated_at == float(T0)

    # a re-created mirror no longer has rev2 at all: changes() falls back to the full contract
    shutil.rmtree(source.mirror)
    git.sync_mirror(source)
    assert not git.is_ancestor(source, rev2, rewritten)
    out = run(source, rev2, rewritten)
    assert all(isinstance(c, Upsert) for c in out) and set(upserts(out)) == set(expected)
    gone_index = dict(index)
    sync_index(gone_index, source, rev2, rewritten)
    assert gone_index == expected


# ---------------------------------------------------------------------------------- recency


def test_updated_at_is_the_commit_time_of_the_last_change(tmp_path: Path, upstream: pygit2.Repository) -> None:
    t = [T0 + i * DAY for i in range(8)]
    commit(upstream, {"a.md": "# A1\n", "b.md": "# B\n", "r.md": "# R1\n", "m.md": "# M1\n"}, time=t[0])
    rev_a = commit(upstream, {"a.md": "# A2\n"}, time=t[1])
    commit(upstream, {"r.md": "# R2\n"}, time=t[2])
    base = commit(upstream, {"r.md": "# R1\n", "c.md": "# C\n"}, time=t[3])  # r.md reverted: a change too
    # a side branch edits m.md later, but the merge keeps main's version: that edit does not count
    side = commit(upstream, {"m.md": "# M-side\n", "s.md": "# S\n"}, time=t[5], branch="side", parents=[base])
    main = commit(upstream, {"n.md": "# N\n"}, time=t[4])
    commit(upstream, {"s.md": "# S\n"}, time=t[6], parents=[main, side])
    head = commit(upstream, {"notes.txt": "not markdown"}, time=t[7])
    source = source_for(tmp_path, str(upstream.workdir))
    git.sync_mirror(source)

    times = {p: f.updated_at for p, f in upserts(run(source, None, head)).items()}
    assert times == {"a.md": t[1], "b.md": t[0], "r.md": t[3], "c.md": t[3], "m.md": t[0], "n.md": t[4], "s.md": t[5]}
    inc = {p: f.updated_at for p, f in upserts(run(source, base, head)).items()}
    assert inc == {"n.md": t[4], "s.md": t[5]}
    assert git.last_change_times(pygit2.Repository(str(source.mirror)), rev_a, ["a.md", "b.md", "zz.md"]) == {
        "a.md": t[1],
        "b.md": t[0],
    }


def test_recency_is_fast_enough_for_a_large_history(tmp_path: Path, upstream: pygit2.Repository) -> None:
    files = {f"notes/{d:02d}/{i:04d}.md": f"# note {d} {i}\n" for d in range(25) for i in range(40)}
    commit(upstream, files, time=T0)
    paths = sorted(files)
    for n in range(1, 101):
        commit(upstream, {paths[(n * 7 + k) % len(paths)]: f"# edit {n} {k}\n" for k in range(5)}, time=T0 + n)
    source = source_for(tmp_path, str(upstream.workdir))
    head = git.sync_mirror(source)
    started = time.perf_counter()
    out = upserts(run(source, None, head))
    assert len(out) == 1000 and time.perf_counter() - started < 5
    assert out[paths[0]].updated_at == float(T0)  # untouched since the first commit: walked to the root


# ------------------------------------------------------------------------------ remote & mirror


def test_remote_head_does_not_fetch(tmp_path: Path, upstream: pygit2.Repository) -> None:
    rev1 = commit(upstream, {"a.md": "# A\n"}, time=T0)
    for url in (str(upstream.workdir), file_url(upstream)):
        source = source_for(tmp_path / url.replace("/", "_").replace(":", "_"), url)
        assert git.mirror_head(source) is None
        assert git.remote_head(source) == rev1
        assert not source.mirror.exists()
        git.sync_mirror(source)
        before = snapshot(source.mirror)
        rev2 = commit(upstream, {"a.md": f"# {url}\n"}, time=T0 + DAY)
        assert git.remote_head(source) == rev2
        assert git.mirror_head(source) == rev1
        assert snapshot(source.mirror) == before
        assert git.sync_mirror(source) == rev2 == git.mirror_head(source)
        rev1 = rev2


def test_branch_selection(tmp_path: Path, upstream: pygit2.Repository) -> None:
    main1 = commit(upstream, {"main.md": "# main\n"}, time=T0)
    notes1 = commit(upstream, {"notes.md": "# notes\n"}, time=T0 + DAY, branch="notes", parents=[])
    url = str(upstream.workdir)

    pinned = source_for(tmp_path / "pinned", url, branch="notes")
    assert git.remote_head(pinned) == notes1 == git.sync_mirror(pinned) == git.mirror_head(pinned)
    assert set(upserts(run(pinned, None, notes1))) == {"notes.md"}

    default = source_for(tmp_path / "default", url)
    assert git.remote_head(default) == main1 == git.sync_mirror(default)

    # the remote switches its default branch: the mirror follows on the next sync
    upstream.set_head("refs/heads/notes")
    notes2 = commit(upstream, {"more.md": "# more\n"}, time=T0 + 2 * DAY, branch="notes")
    assert git.remote_head(default) == notes2
    assert git.sync_mirror(default) == notes2 == git.mirror_head(default)

    missing = source_for(tmp_path / "missing", url, branch="nope")
    with pytest.raises(SourceError, match="branch 'nope' not found on the remote"):
        git.remote_head(missing)
    with pytest.raises(SourceError, match="branch 'nope' not found in"):
        git.mirror_head(GitSource("notes", url, pinned.mirror, "nope", FileSelection()))


def test_unreachable_remote_is_one_line_naming_source_and_url(tmp_path: Path, upstream: pygit2.Repository) -> None:
    url = str(tmp_path / "no-such-repo")
    source = source_for(tmp_path, url)
    for call in (git.remote_head, git.sync_mirror):
        with pytest.raises(SourceError) as exc:
            call(source)
        message = str(exc.value)
        assert "\n" not in message and "'notes'" in message and url in message
    assert not source.mirror.exists() and not list(source.mirror.parent.iterdir())  # no half clone left

    secret = source_for(tmp_path, "https://me:s3cret@127.0.0.1:1/notes.git")
    with pytest.raises(SourceError) as exc:
        git.remote_head(secret)
    assert "s3cret" not in str(exc.value) and "(https://me@127.0.0.1:1/notes.git)" in str(exc.value)


def test_network_timeout_kills_git_and_its_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ssh-ran"
    monkeypatch.setenv("GIT_SSH_COMMAND", f"touch {marker}; sleep 30 #")
    monkeypatch.setenv("GIT_SSH_VARIANT", "ssh")
    monkeypatch.setattr(git, "LS_REMOTE_TIMEOUT", 0.5)
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"timed out after 0\.5 s"):
        git.remote_head(source_for(tmp_path, "ssh://git@example.invalid/notes.git"))
    assert marker.exists() and time.monotonic() - started < 5


def test_upstream_is_never_written(tmp_path: Path, upstream: pygit2.Repository) -> None:
    rev1 = commit(upstream, {"a.md": "# A\n", "b.md": "# B\n"}, time=T0)
    rev2 = commit(upstream, {"a.md": "# A2\n"}, time=T0 + DAY)
    up = Path(upstream.workdir)
    before = snapshot(up)
    source = source_for(tmp_path, str(up))
    git.remote_head(source)
    git.sync_mirror(source)  # clone
    git.sync_mirror(source)  # fetch
    run(source, rev1, rev2)
    run(source, None, rev2)
    git.read_blob(source, rev2, "a.md")
    assert snapshot(up) == before
    # the mirror shares no inodes with the upstream (clone --no-local)
    up_inodes = {p.stat().st_ino for p in up.rglob("*") if p.is_file()}
    assert not up_inodes & {p.stat().st_ino for p in source.mirror.rglob("*") if p.is_file()}
    with pytest.raises(SourceError, match="is the upstream repository itself"):
        git.sync_mirror(GitSource("notes", str(up / ".git"), up / ".git", None, FileSelection()))


def test_mirror_recovery_and_refusals(tmp_path: Path, upstream: pygit2.Repository) -> None:
    rev = commit(upstream, {"a.md": "# A\n"}, time=T0)
    source = source_for(tmp_path, str(upstream.workdir))

    source.mirror.mkdir(parents=True)  # empty folder: clone into it
    assert git.sync_mirror(source) == rev
    (source.mirror / "HEAD").write_text("garbage\n")  # corrupt: our cache, re-clone
    assert git.mirror_head(source) is None
    assert git.sync_mirror(source) == rev and git.mirror_head(source) == rev
    shutil.rmtree(source.mirror / "objects" / "pack")  # refs intact, objects gone
    assert git.sync_mirror(source) == rev and git.read_blob(source, rev, "a.md") == b"# A\n"

    user_dir = tmp_path / "mine"
    (user_dir / "objects").mkdir(parents=True)
    (user_dir / "thesis.tex").write_text("precious")
    with pytest.raises(SourceError, match="refusing to replace it"):
        git.sync_mirror(GitSource("notes", str(upstream.workdir), user_dir, None, FileSelection()))
    assert (user_dir / "thesis.tex").read_text() == "precious"

    working = tmp_path / "working"
    init_upstream(working)
    with pytest.raises(SourceError, match="not a bare git mirror"):
        git.sync_mirror(GitSource("notes", str(upstream.workdir), working, None, FileSelection()))

    pushed_to = tmp_path / "pushed-to.git"
    pygit2.init_repository(str(pushed_to), bare=True)
    with pytest.raises(SourceError, match="not a mirror"):
        git.sync_mirror(GitSource("notes", str(upstream.workdir), pushed_to, None, FileSelection()))


def test_fetch_does_not_fire_the_mirrors_hook_and_ignores_hook_env(
    tmp_path: Path, upstream: pygit2.Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit(upstream, {"a.md": "# A\n"}, time=T0)
    source = source_for(tmp_path, str(upstream.workdir))
    git.sync_mirror(source)
    fired = tmp_path / "hook-fired"
    hook = source.mirror / "hooks" / "reference-transaction"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\ntouch {fired}\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    # as if started from a hook of another repository: its GIT_* variables must not redirect us
    other = Path(pygit2.init_repository(str(tmp_path / "other.git"), bare=True).path)
    monkeypatch.setenv("GIT_DIR", str(other))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(other / "objects"))
    rev2 = commit(upstream, {"b.md": "# B\n"}, time=T0 + DAY)
    assert git.sync_mirror(source) == rev2
    assert git.read_blob(source, rev2, "b.md") == b"# B\n"
    assert not fired.exists()
    assert not [p for p in (other / "objects").rglob("*") if p.is_file()]
    # the hook itself works: any other git command moving a ref in the mirror fires it
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_OBJECT_DIRECTORY")}
    subprocess.run(["git", "--git-dir", str(source.mirror), "update-ref", "refs/heads/x", rev2], env=env, check=True)
    assert fired.exists()


def test_read_blob(tmp_path: Path, upstream: pygit2.Repository) -> None:
    rev1 = commit(upstream, {"dir/a.md": "# A1\n", "l.md": Symlink("dir/a.md")}, time=T0)
    rev2 = commit(upstream, {"dir/a.md": "# A2\n"}, time=T0 + DAY)
    source = source_for(tmp_path, str(upstream.workdir))
    with pytest.raises(SourceError, match="no mirror"):
        git.read_blob(source, rev2, "dir/a.md")
    git.sync_mirror(source)
    assert git.read_blob(source, rev1, "dir/a.md") == b"# A1\n"
    assert git.read_blob(source, rev2, "dir/a.md") == b"# A2\n"
    for path in ("dir/missing.md", "dir", "l.md"):
        with pytest.raises(SourceError, match=path):
            git.read_blob(source, rev2, path)
    with pytest.raises(SourceError, match="not found"):
        git.read_blob(source, "0" * 40, "dir/a.md")


def test_git_ignores_the_repository_of_a_hook_that_runs_us(
    tmp_path: Path,
    upstream: pygit2.Repository,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inside a git hook GIT_DIR/GIT_WORK_TREE point at the firing repository: our clone, fetch
    and ls-remote must still work on the url and mirror we name."""
    rev = commit(upstream, {"a.md": "# A\n"}, time=T0)
    elsewhere = tmp_path / "elsewhere.git"
    pygit2.init_repository(str(elsewhere), bare=True)
    monkeypatch.setenv("GIT_DIR", str(elsewhere))
    monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path))
    monkeypatch.setenv("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    assert "GIT_DIR" not in git_environment() and "GIT_WORK_TREE" not in git_environment()
    assert git_environment(LC_ALL="C.UTF-8")["LC_ALL"] == "C.UTF-8"
    assert git_environment()["GIT_SSH_COMMAND"] == "ssh -o BatchMode=yes"  # the user's setting stays
    assert git_environment()["GIT_TERMINAL_PROMPT"] == "0"
    source = source_for(tmp_path, file_url(upstream))
    assert git.remote_head(source) == rev
    git.sync_mirror(source)
    assert git.mirror_head(source) == rev
    assert not list(pygit2.Repository(str(elsewhere)).references)  # nothing went into the hook's repository


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("/srv/notes.git", "/srv/notes.git"),
        ("relative/notes.git", "relative/notes.git"),
        ("file:///srv/my%20notes.git", "/srv/my notes.git"),
        ("ssh://host/notes.git", None),
        ("https://host/notes.git", None),
        ("git@host:notes.git", None),  # scp-style: a ':' before the first '/'
    ],
)
def test_local_repository_path(url: str, path: str | None) -> None:
    assert local_repository_path(url) == (Path(path) if path else None)
