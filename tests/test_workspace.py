"""Workspace driver: real files in tmp_path, changes checked against what the store would know."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import pytest

from indexer.config import Config, EmbeddingConfig, WorkspaceSource
from indexer.errors import SourceError
from indexer.globs import FileSelection, literal_folder
from indexer.model import Change, Delete, KnownFile, Skipped, Touch, Upsert
from indexer.sources import workspace
from indexer.sources.workspace import coverage_report, list_files, scan


def write(root: Path, rel: str, data: str | bytes = "# note\n", mtime: float | None = None) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def source(
    root: Path, paths: tuple[str, ...] = ("**",), include: tuple[str, ...] = ("*.md",), exclude: tuple[str, ...] = ()
) -> WorkspaceSource:
    return WorkspaceSource(id="ws", root=root, selection=FileSelection(paths=paths, include=include, exclude=exclude))


def changes(src: WorkspaceSource, known: dict[str, KnownFile] | None = None, **kw: object) -> list[Change]:
    return list(scan(src, known or {}, **kw))  # type: ignore[arg-type]


def apply(known: dict[str, KnownFile], found: Iterable[Change]) -> dict[str, KnownFile]:
    """What the store would remember after applying `found`."""
    known = dict(known)
    for change in found:
        if isinstance(change, Upsert):
            f = change.file
            known[f.path] = KnownFile(f.sha256, f.size, f.mtime)
        elif isinstance(change, Touch):
            known[change.path] = KnownFile(known[change.path].sha256, change.size, change.mtime)
        elif isinstance(change, Delete):
            known.pop(change.path, None)
    return known


def upserted(found: Iterable[Change]) -> dict[str, str]:
    return {c.file.path: c.file.text for c in found if isinstance(c, Upsert)}


def checksums(root: Path) -> dict[str, tuple[str, int]]:
    """Every file and folder below root (no symlink following): content hash and mtime."""
    result: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    result[path] = (hashlib.sha256(f.read()).hexdigest(), st.st_mtime_ns)
            else:
                result[path] = ("", st.st_mtime_ns)
    return result


# --- scope -------------------------------------------------------------------------------


def test_paths_gate_then_include_then_exclude_wins(tmp_path: Path) -> None:
    for rel in ("notes/a.md", "notes/b.txt", "notes/secret.md", "notes/drafts/c.md", "other/d.md", "top.md"):
        write(tmp_path, rel)
    src = source(tmp_path, paths=("notes/**",), include=("*.md", "*.txt"), exclude=("notes/drafts/**", "secret.md"))
    assert sorted(upserted(changes(src))) == ["notes/a.md", "notes/b.txt"]
    assert sorted(item.rel for item in list_files(src)) == ["notes/a.md", "notes/b.txt"]


def test_a_paths_entry_without_a_slash_matches_at_any_depth(tmp_path: Path) -> None:
    """`paths: [notes.md]` admits sub/notes.md (a name without '/' matches at any depth, as the
    git driver's diff already decided): the walk must not prune `sub/` on the literal name."""
    for rel in ("notes.md", "sub/notes.md", "sub/deeper/notes.md", "sub/other.md"):
        write(tmp_path, rel)
    src = source(tmp_path, paths=("notes.md",))
    assert set(upserted(changes(src))) == {"notes.md", "sub/notes.md", "sub/deeper/notes.md"}
    assert all(src.selection.admits(rel) for rel in ("sub/notes.md", "sub/deeper/notes.md"))


@pytest.mark.parametrize(
    ("pattern", "folder"),
    [
        ("notes.md", ""),
        ("*.md", ""),
        ("**", ""),
        ("**/x.md", ""),
        ("/docs/", ""),
        ("docs/**", "docs"),
        ("docs/a/*.md", "docs/a"),
        ("/docs/a/", "docs/a"),
        ("docs/x[12]/y", "docs"),
        ("docs/notes.md", "docs/notes.md"),
    ],
)
def test_literal_folder(pattern: str, folder: str) -> None:
    assert literal_folder(pattern) == folder


def test_git_folders_are_never_walked_even_when_paths_admit_them(tmp_path: Path) -> None:
    write(tmp_path, "repo/.git/info/x.md")
    write(tmp_path, "repo/.github/y.md")
    write(tmp_path, "repo/z.md")
    assert sorted(upserted(changes(source(tmp_path)))) == ["repo/z.md"]
    named = source(tmp_path, paths=("**", "repo/.github/**", "repo/.git/**"))
    assert sorted(upserted(changes(named))) == ["repo/.github/y.md", "repo/z.md"]


def test_hidden_names_are_left_out_unless_a_pattern_names_them(tmp_path: Path) -> None:
    """An Obsidian vault: its settings, the notes it deleted (`.trash/`) and a dot-file draft
    are not notes; `**` and `*.md` do not mean them, a pattern that spells the name does."""
    write(tmp_path, ".obsidian/workspace.md")
    write(tmp_path, ".trash/deleted.md")
    write(tmp_path, "daily/.draft.md")
    write(tmp_path, "daily/2026-12-08.md")
    write(tmp_path, ".notes/kept.md")
    assert sorted(upserted(changes(source(tmp_path)))) == ["daily/2026-12-08.md"]
    named = source(tmp_path, paths=("daily/**", ".notes/**"), include=("*.md", ".draft.md"))
    assert sorted(upserted(changes(named))) == [".notes/kept.md", "daily/.draft.md", "daily/2026-12-08.md"]
    trash = FileSelection(paths=("**",))
    assert trash.hidden(".trash/deleted.md") and not trash.may_contain(".trash")
    assert not FileSelection(paths=(".trash/**",)).hidden(".trash/deleted.md")
    # a name is admitted where the pattern spells it: `a/.old/**` is no `b/.old/`
    spelled = FileSelection(paths=("**", "a/.old/**"))
    assert spelled.admits("a/.old/x.md") and not spelled.admits("b/.old/x.md") and not spelled.may_contain("b/.old")
    anywhere = FileSelection(paths=("**/.notes/**",))
    assert anywhere.admits(".notes/y.md") and anywhere.admits("x/.notes/y.md")


# --- change detection --------------------------------------------------------------------


def test_new_modified_touched_deleted_renamed(tmp_path: Path) -> None:
    src = source(tmp_path)
    write(tmp_path, "a.md", "# A\n", mtime=1_000)
    write(tmp_path, "b.md", "# B\n", mtime=1_000)
    write(tmp_path, "c.md", "# C\n", mtime=1_000)
    write(tmp_path, "sub/d.md", "# D\n", mtime=1_000)

    first = changes(src)
    assert all(isinstance(c, Upsert) for c in first)
    [d] = [c.file for c in first if isinstance(c, Upsert) and c.file.path == "sub/d.md"]
    assert (d.text, d.size, d.mtime, d.updated_at, d.collection) == ("# D\n", 4, 1_000, 1_000, None)
    assert d.sha256 == hashlib.sha256(b"# D\n").hexdigest()
    known = apply({}, first)
    assert changes(src, known) == []  # nothing changed: stat only

    write(tmp_path, "a.md", "# A\n", mtime=2_000)  # same bytes, new mtime
    write(tmp_path, "b.md", "# B2\n", mtime=2_000)  # new content
    (tmp_path / "c.md").unlink()
    (tmp_path / "sub/d.md").rename(tmp_path / "sub/e.md")  # rename keeps mtime
    write(tmp_path, "f.md", "# F\n", mtime=2_000)
    second = changes(src, known)
    assert Touch("a.md", 4, 2_000) in second
    assert upserted(second) == {"b.md": "# B2\n", "sub/e.md": "# D\n", "f.md": "# F\n"}
    assert [c for c in second if isinstance(c, Delete)] == [Delete("c.md"), Delete("sub/d.md")]
    assert len(second) == 6
    known = apply(known, second)
    assert changes(src, known) == []


def test_same_stat_is_trusted_without_reading(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# A\n", mtime=1_000)
    src = source(tmp_path)
    known = apply({}, changes(src))
    write(tmp_path, "a.md", "# Z\n", mtime=1_000)  # same size, same mtime: deliberately invisible
    assert changes(src, known) == []
    assert upserted(changes(src, known, full=True)) == {"a.md": "# Z\n"}


def test_full_yields_every_file_and_still_deletes(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# A\n")
    write(tmp_path, "b.md", "# B\n")
    src = source(tmp_path)
    known = apply({}, changes(src))
    (tmp_path / "b.md").unlink()
    found = changes(src, known, full=True)
    assert upserted(found) == {"a.md": "# A\n"}
    assert found[-1] == Delete("b.md")
    assert len(found) == 2


def test_scope_change_deletes_files_no_longer_admitted(tmp_path: Path) -> None:
    write(tmp_path, "notes/a.md")
    write(tmp_path, "other/b.md")
    known = apply({}, changes(source(tmp_path)))
    assert changes(source(tmp_path, paths=("notes/**",)), known) == [Delete("other/b.md")]


# --- content -----------------------------------------------------------------------------


def test_unindexable_files_are_skipped_and_left_to_the_caller_to_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "nul.md", b"# title\n\x00\x01binary")
    write(tmp_path, "latin1.md", "# Café\n".encode("latin-1"))
    write(tmp_path, "huge.md", "x" * 101)
    write(tmp_path, "ok.md", "x" * 100)
    with caplog.at_level(logging.WARNING):
        found = changes(source(tmp_path), max_file_bytes=100)
    skipped = {c.path: c.reason for c in found if isinstance(c, Skipped)}
    assert skipped == {
        "nul.md": "binary or not UTF-8",
        "latin1.md": "binary or not UTF-8",
        "huge.md": "too large (101 bytes > limit 100)",
    }
    assert list(upserted(found)) == ["ok.md"]
    for path in skipped:  # the sync logs each Skipped once; a second line here would repeat it
        assert path not in caplog.text


def test_a_note_with_a_few_bytes_that_are_not_utf8_is_indexed_with_replacement_characters(tmp_path: Path) -> None:
    """One stray byte (a character pasted from a Latin-1 file) no longer drops the whole note
    from the index: it reads as U+FFFD, as `show` shows it; a note in another encoding, whose
    every accented letter would be lost, is still skipped."""
    body = "# Running Go programs\n\n" + "go run main.go builds and runs the program.\n" * 10
    write(tmp_path, "stray.md", body.encode() + b"caf\xe9 \xff\n")
    write(tmp_path, "cp1250.md", ("# Zálohy\n\nPříliš žluťoučký kůň úpěl ďábelské ódy.\n" * 5).encode("cp1250"))
    found = changes(source(tmp_path))
    texts = {c.file.path: c.file.text for c in found if isinstance(c, Upsert)}
    assert texts == {"stray.md": body + "caf\ufffd \ufffd\n"}
    assert [(c.path, c.reason) for c in found if isinstance(c, Skipped)] == [("cp1250.md", "binary or not UTF-8")]


def test_known_file_turning_binary_drops_its_stale_copy(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# A\n", mtime=1_000)
    src = source(tmp_path)
    known = apply({}, changes(src))
    write(tmp_path, "a.md", b"\x00\x00", mtime=2_000)
    assert changes(src, known) == [Delete("a.md"), Skipped("a.md", "binary or not UTF-8")]


def test_bom_is_stripped_and_crlf_kept(tmp_path: Path) -> None:
    raw = b"\xef\xbb\xbf# T\xc3\xadtle\r\n\r\nbody\r\n"
    write(tmp_path, "bom.md", raw)
    [change] = changes(source(tmp_path))
    assert isinstance(change, Upsert)
    assert change.file.text == "# Títle\r\n\r\nbody\r\n"
    assert change.file.sha256 == hashlib.sha256(raw).hexdigest()  # hash of the bytes on disk
    assert change.file.size == len(raw)


def test_unicode_and_spaces_in_names_become_nfc_paths(tmp_path: Path) -> None:
    nfd = unicodedata.normalize("NFD", "Poznámky ščř/Dlouhý název.md")
    write(tmp_path, nfd, "# Ahoj\n")
    write(tmp_path, "日本語 メモ.md", "# メモ\n")
    found = upserted(changes(source(tmp_path)))
    assert found == {"Poznámky ščř/Dlouhý název.md": "# Ahoj\n", "日本語 メモ.md": "# メモ\n"}
    assert all(unicodedata.is_normalized("NFC", p) for p in found)


def test_file_vanishing_between_listing_and_reading(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# A\n")
    write(tmp_path, "b.md", "# B\n")
    src = source(tmp_path)
    it = scan(src, {})
    assert isinstance(next(it), Upsert)  # listing is complete, a.md read; b.md not yet
    (tmp_path / "b.md").unlink()
    assert list(it) == [Skipped("b.md", "vanished while scanning")]

    write(tmp_path, "b.md", "# B\n")
    known = {"b.md": KnownFile("0" * 64, 1, 1.0)}  # stale stat: b.md will be read
    it = scan(src, known)
    assert isinstance(next(it), Upsert)
    (tmp_path / "b.md").unlink()
    assert list(it) == [Delete("b.md")]  # exactly once


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of permissions")
def test_unreadable_file_is_skipped_and_keeps_its_index(tmp_path: Path) -> None:
    path = write(tmp_path, "a.md", "# A\n", mtime=1_000)
    src = source(tmp_path)
    known = apply({}, changes(src))
    os.utime(path, (2_000, 2_000))
    path.chmod(0)
    try:
        [change] = changes(src, known)
    finally:
        path.chmod(0o644)
    assert isinstance(change, Skipped) and change.reason.startswith("unreadable")


def test_missing_root_raises_at_call_time(tmp_path: Path) -> None:
    missing = source(tmp_path / "nope")
    with pytest.raises(SourceError, match=r"workspace source 'ws': folder .*nope does not exist"):
        scan(missing, {})
    with pytest.raises(SourceError, match="does not exist"):
        list_files(missing)
    write(tmp_path, "file")
    with pytest.raises(SourceError, match="is not a folder"):
        scan(source(tmp_path / "file"), {})


# --- symlinks ----------------------------------------------------------------------------


def test_symlinks_are_followed_only_inside_the_root(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "root"
    write(root, "real/a.md", "# A\n")
    write(tmp_path, "outside/secret.md", "# secret\n")
    os.symlink(tmp_path / "outside/secret.md", root / "leak.md")
    os.symlink(tmp_path / "outside", root / "leakdir")
    os.symlink(root / "real/a.md", root / "alias.md")
    write(root, "hidden/b.md", "# B\n")
    os.symlink(root / "hidden", root / "view")
    os.symlink(root / "missing.md", root / "dangling.md")
    os.symlink(tmp_path / "outside", root / "unrelated")  # outside `paths`: not even logged
    os.symlink(tmp_path / "outside/secret.md", root / "real/pic.png")  # not included: quiet
    src = source(root, paths=("real/**", "view/**", "leakdir/**", "leak.md", "alias.md", "dangling.md"))
    with caplog.at_level(logging.WARNING):
        found_changes = changes(src)
    found = upserted(found_changes)
    assert found == {"real/a.md": "# A\n", "alias.md": "# A\n", "view/b.md": "# B\n"}
    skips = {c.path: c.reason for c in found_changes if isinstance(c, Skipped)}  # counted and logged by the sync
    assert skips.keys() == {"leak.md", "dangling.md", "leakdir/"}, skips
    assert "outside" in skips["leak.md"] and skips["dangling.md"] == "broken symlink"
    assert skips["leakdir/"].startswith("symlink to a folder outside")
    assert "unrelated" not in caplog.text and "pic.png" not in caplog.text


def test_folder_reachable_twice_is_listed_under_its_real_path(tmp_path: Path) -> None:
    write(tmp_path, "z-real/a.md")
    os.symlink(tmp_path / "z-real", tmp_path / "a-link")
    assert list(upserted(changes(source(tmp_path)))) == ["z-real/a.md"]


def test_symlink_loops_terminate(tmp_path: Path) -> None:
    write(tmp_path, "a/b/note.md")
    os.symlink(tmp_path, tmp_path / "a/b/to-root")
    os.symlink(tmp_path / "a", tmp_path / "a/b/to-parent")
    os.symlink(tmp_path / "self", tmp_path / "self")
    os.symlink(tmp_path / "ping", tmp_path / "pong")
    os.symlink(tmp_path / "pong", tmp_path / "ping")
    assert list(upserted(changes(source(tmp_path)))) == ["a/b/note.md"]


def test_a_scoped_scan_lists_no_more_than_the_whole_one_below_a_loop(tmp_path: Path) -> None:
    """`reindex notes:hostile` with `hostile/loop -> ..`: a walk scoped to `hostile` did not
    find the root claimed (its listing was scoped away) and listed the tree again under the
    link; the next full sync took those copies back out, and so on."""
    write(tmp_path, "top.md")
    write(tmp_path, "hostile/h.md")
    write(tmp_path, "other/o.md")
    os.symlink(tmp_path, tmp_path / "hostile/loop")
    whole = upserted(changes(source(tmp_path)))
    assert sorted(whole) == ["hostile/h.md", "other/o.md", "top.md"]
    src = source(tmp_path)
    scoped = dataclasses.replace(src, selection=src.selection.within("hostile"))
    assert sorted(upserted(changes(scoped))) == ["hostile/h.md"]
    looped = dataclasses.replace(src, selection=src.selection.within("hostile/loop"))
    assert list(upserted(changes(looped))) == []


# --- inbox, _meta.yaml, collections ------------------------------------------------------


def test_inbox_at_library_or_collection_root_is_never_indexed(tmp_path: Path) -> None:
    write(tmp_path, "inbox.md")
    write(tmp_path, "coll/_meta.yaml", "name: coll\n")
    write(tmp_path, "coll/inbox.md")
    write(tmp_path, "coll/sub/inbox.md")  # not directly in the collection folder
    write(tmp_path, "plain/inbox.md")  # not a collection
    write(tmp_path, "coll/note.md")
    found = upserted(changes(source(tmp_path, include=("*",))))  # `*` would admit _meta.yaml too
    assert sorted(found) == ["coll/note.md", "coll/sub/inbox.md", "plain/inbox.md"]


def test_scan_fills_the_nearest_collection(tmp_path: Path) -> None:
    write(tmp_path, "_meta.yaml", "name: library\n")
    write(tmp_path, "work/_meta.yaml", "name: work\ndescription: job\n")
    write(tmp_path, "work/jira/_meta.yaml", "name: work/jira\n")
    write(tmp_path, "work/jira/deep/n.md")
    write(tmp_path, "work/w.md")
    write(tmp_path, "top.md")
    found = {c.file.path: c.file.collection for c in changes(source(tmp_path)) if isinstance(c, Upsert)}
    assert found == {"work/jira/deep/n.md": "work/jira", "work/w.md": "work", "top.md": "library"}


# --- safety and speed --------------------------------------------------------------------


def test_scanning_never_changes_the_source_tree(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# A\r\n")
    write(tmp_path, "bin.md", b"\x00")
    write(tmp_path, "coll/_meta.yaml", "name: [broken\n")
    write(tmp_path, "coll/inbox.md")
    write(tmp_path, "coll/big.md", "x" * 500)
    os.symlink(tmp_path / "coll", tmp_path / "loop")
    before = checksums(tmp_path)
    src = source(tmp_path)
    known = apply({}, changes(src, max_file_bytes=100))
    changes(src, known, full=True, max_file_bytes=100)
    list(list_files(src))
    coverage_report(config(tmp_path, src))
    assert checksums(tmp_path) == before


def test_ten_thousand_unchanged_files_yield_no_changes(tmp_path: Path) -> None:
    """Speed is measured in bench/; here only the no-change answer at scale."""
    seed = write(tmp_path / "seed", "seed.md")
    for d in range(50):
        folder = tmp_path / "tree" / f"folder {d}" / "sub"
        folder.mkdir(parents=True)
        for i in range(200):
            os.link(seed, folder / f"note {i}.md")  # hard links: far quicker to create than files
    src = source(tmp_path / "tree")
    known = {item.rel: KnownFile("-", item.stat.st_size, item.stat.st_mtime) for item in list_files(src)}
    assert len(known) == 10_000
    assert changes(src, known) == []


# --- coverage report ---------------------------------------------------------------------


def config(root: Path, *sources: WorkspaceSource) -> Config:
    return Config(
        path=None,
        root=root,
        db=root / "db.sqlite",
        log=root / "log.txt",
        embedding=EmbeddingConfig(),
        sources={s.id: s for s in sources},
    )


def test_coverage_report_names_uncovered_markdown_folders(tmp_path: Path) -> None:
    write(tmp_path, "notes/a.md")
    write(tmp_path, "notes-archive/2023/x.md")
    write(tmp_path, "notes-archive/2024/y.md")
    write(tmp_path, "notes-archive/z.txt")
    write(tmp_path, "mixed/covered.md")  # one admitted file covers the whole folder
    write(tmp_path, "mixed/other/not.md")
    write(tmp_path, "images/p.png")  # no markdown: not worth a line
    write(tmp_path, ".hidden/h.md")  # hidden: ignored
    write(tmp_path, "nested/sub/n.md")  # covered by a source rooted below it
    write(tmp_path, "exact/e.md")  # covered by a source rooted at the folder itself
    write(tmp_path, "single/one.md")
    write(tmp_path, "top.md")  # not in a folder
    main = source(tmp_path, paths=("notes/**", "mixed/covered.md"))
    nested = WorkspaceSource(id="nested", root=tmp_path / "nested" / "sub", selection=FileSelection(paths=("**",)))
    exact = WorkspaceSource(id="exact", root=tmp_path / "exact", selection=FileSelection(paths=("**",)))
    root = os.path.realpath(tmp_path)
    assert coverage_report(config(tmp_path, main, nested, exact)) == [
        f"not indexed: notes-archive/ (2 .md files) under {root}",
        f"not indexed: single/ (1 .md file) under {root}",
    ]


def test_coverage_report_stops_counting_when_nothing_can_be_covered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace, "COVERAGE_CAP", 3)
    for i in range(5):
        write(tmp_path, f"old/{i}.md")
    write(tmp_path, "notes/a.md")
    [line] = coverage_report(config(tmp_path, source(tmp_path, paths=("notes/**",))))
    assert line.startswith("not indexed: old/ (≥3 .md files)")


def test_coverage_report_leaves_out_what_exclude_names(tmp_path: Path) -> None:
    write(tmp_path, "notes/a.md")
    write(tmp_path, "drafts/wip.md")  # excluded as a folder, on purpose
    write(tmp_path, "drafts/deep/more.md")
    write(tmp_path, "scratch/x.tmp.md")  # excluded file by file
    write(tmp_path, "scratch/kept.md")  # but this one is a gap: paths leaves it out
    write(tmp_path, "archive/old.md")  # outside paths: still a gap
    main = source(tmp_path, paths=("notes/**",), exclude=("drafts/**", "*.tmp.md"))
    root = os.path.realpath(tmp_path)
    assert coverage_report(config(tmp_path, main)) == [
        f"not indexed: archive/ (1 .md file) under {root}",
        f"not indexed: scratch/ (1 .md file) under {root}",
    ]


def test_coverage_report_leaves_out_our_own_tables_of_contents(tmp_path: Path) -> None:
    """The index's folder inside a workspace root its `paths` leave out: the TOC markdown there
    is ours, not notes the user forgot to index."""
    write(tmp_path, "notes/a.md")
    write(tmp_path, "toc/notes.md")  # beside db.sqlite: `config` puts the index at the root
    write(tmp_path, "archive/old.md")
    root = os.path.realpath(tmp_path)
    assert coverage_report(config(tmp_path, source(tmp_path, paths=("notes/**",)))) == [
        f"not indexed: archive/ (1 .md file) under {root}"
    ]


def test_coverage_report_ignores_missing_roots(tmp_path: Path) -> None:
    assert coverage_report(config(tmp_path, source(tmp_path / "gone"))) == []


def _unindexable_tree(root: Path) -> None:
    """Entries the scope admits that can never be indexed, beside one ordinary note."""
    write(root, "ok.md", "# ok\n")
    os.mkfifo(root / "fifo.md")
    os.mkfifo(root / "pipe.txt")  # not admitted: not a skip
    os.symlink("/dev/zero", root / "zero.md")
    os.symlink(root / "fifo.md", root / "fifolink.md")
    os.symlink(root / "loop.md", root / "loop.md")
    with open(os.path.join(os.fsencode(root), b"bad\xff\xfeutf.md"), "wb") as f:
        f.write(b"# latin-1 name\n")


def test_entries_that_cannot_be_indexed_are_skipped_with_a_reason(tmp_path: Path) -> None:
    _unindexable_tree(tmp_path)
    found = changes(source(tmp_path))  # a FIFO is never opened, so this cannot block
    assert upserted(found) == {"ok.md": "# ok\n"}
    skips = [(c.path, c.reason) for c in found if isinstance(c, Skipped)]
    assert sorted(skips) == [
        ("bad\\xff\\xfeutf.md", "its name is not valid UTF-8"),
        ("fifo.md", "a FIFO, not a regular file"),
        ("fifolink.md", "a FIFO, not a regular file"),
        ("loop.md", "symlink loop"),
        ("zero.md", f"symlink whose target is outside {os.path.realpath(tmp_path)}"),
    ]


def test_sync_counts_and_logs_each_skip_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, db_url: str | None
) -> None:
    from indexer.config import load_config
    from indexer.sync import run_sync
    from tests.conftest import make_config
    from tests.fakes import FakeEmbedder

    notes = tmp_path / "notes"
    notes.mkdir()
    _unindexable_tree(notes)
    config = load_config(make_config(tmp_path, notes, db=db_url))
    with caplog.at_level(logging.WARNING):
        report = run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding))
    assert report.sources[0].skipped == 5
    assert sorted(path for path, _ in report.sources[0].skips) == [
        "bad\\xff\\xfeutf.md",
        "fifo.md",
        "fifolink.md",
        "loop.md",
        "zero.md",
    ]
    for name in ("bad\\xff\\xfeutf.md", "fifo.md", "fifolink.md", "loop.md", "zero.md"):
        assert caplog.text.count(f"notes:{name}: skipped") == 1, caplog.text


def test_watch_logs_a_skip_once_per_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, db_url: str | None
) -> None:
    """Each reconcile and batch re-walks the folder; the undecodable name must not be logged again."""
    from indexer.config import load_config
    from indexer.watch import Watcher
    from tests.conftest import make_config
    from tests.fakes import FakeEmbedder

    notes = tmp_path / "notes"
    write(notes, "ok.md", "# ok\n")
    with open(os.path.join(os.fsencode(notes), b"bad\xffname.md"), "wb") as f:
        f.write(b"# x\n")
    config = load_config(make_config(tmp_path, notes, db=db_url))
    watcher = Watcher(config, lambda: FakeEmbedder(config.embedding), reconcile_on_start=False)
    watcher.start()
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                assert watcher.reconcile() is not None
    finally:
        watcher.stop()
    assert caplog.text.count("bad\\xffname.md: skipped: its name is not valid UTF-8") == 1, caplog.text


def _twins(root: Path) -> tuple[str, str]:
    nfc_name, nfd_name = (unicodedata.normalize(form, "é.md") for form in ("NFC", "NFD"))
    write(root, nfd_name, "# nfd\n")
    write(root, nfc_name, "# nfc\n")
    if len(os.listdir(root)) != 2:
        pytest.skip("this filesystem normalises names, so it cannot hold both spellings")
    return nfc_name, nfd_name


def test_nfc_and_nfd_twins_index_the_nfc_file_and_settle(tmp_path: Path) -> None:
    nfc_name, nfd_name = _twins(tmp_path)
    src = source(tmp_path)
    first = changes(src)
    assert upserted(first) == {nfc_name: "# nfc\n"}
    skips = [c for c in first if isinstance(c, Skipped)]
    assert [s.path for s in skips] == [nfc_name] and ascii(nfd_name) in skips[0].reason
    known = apply({}, first)
    for _ in range(2):  # the index converges: nothing flips back to the other file
        again = changes(src, known)
        assert not [c for c in again if isinstance(c, (Upsert, Delete, Touch))], again
    # the rule does not depend on which name was created first, nor on a previous index
    os.remove(tmp_path / nfc_name)
    assert upserted(changes(src, known)) == {nfc_name: "# nfd\n"}


def test_nfc_and_nfd_twins_status_settles_after_one_sync(tmp_path: Path, db_url: str | None) -> None:
    from indexer.config import load_config
    from indexer.freshness import workspace_freshness
    from indexer.sync import run_sync
    from tests.conftest import make_config, open_index
    from tests.fakes import FakeEmbedder

    notes = tmp_path / "notes"
    notes.mkdir()
    _twins(notes)
    config = load_config(make_config(tmp_path, notes, db=db_url))
    first = run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding))
    assert first.sources[0].added == 1 and first.sources[0].skipped == 1
    second = run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding))
    assert (second.sources[0].added, second.sources[0].updated, second.sources[0].deleted) == (0, 0, 0)
    store = open_index(config, readonly=True)
    try:
        lag = workspace_freshness(config.sources["notes"], store, "", config.max_file_bytes)  # type: ignore[arg-type]
    finally:
        store.close()
    fresh = lag.to_json()
    assert fresh["lags"] is False, fresh
