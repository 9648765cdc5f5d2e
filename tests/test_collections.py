"""Collections: folders with `_meta.yaml`, found with the workspace walk's rules."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from indexer.collections import CollectionFolder, collection_for, find_collections, load_collections, walk_folders
from indexer.config import Config
from indexer.globs import FileSelection
from indexer.model import CollectionProblem
from indexer.store import SearchScope, open_store
from indexer.sync import SyncReport
from tests.conftest import keywords
from tests.pg import both_backends
from tests.store_checks import write_mark

ALL = FileSelection(paths=("**",))


def write(root: Path, rel: str, text: str = "# note\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def by_folder(collections: list[CollectionFolder]) -> dict[str, CollectionFolder]:
    return {c.folder: c for c in collections}


def test_meta_yaml_makes_a_folder_a_collection(tmp_path: Path) -> None:
    write(tmp_path, "work/jira/_meta.yaml", 'name: work/jira\ndescription: "Jira: tickets"\ntags: [corp, jira]\n')
    write(tmp_path, "work/jira/notes.md")
    write(tmp_path, "life/books/_meta.yaml", "description: Books I read\ntags: books\n")
    write(tmp_path, "plain/x.md")
    found = find_collections("memo", tmp_path, ALL)
    assert found == [
        CollectionFolder(
            name="life/books", description="Books I read", tags=("books",), source_id="memo", folder="life/books"
        ),
        CollectionFolder(
            name="work/jira", description="Jira: tickets", tags=("corp", "jira"), source_id="memo", folder="work/jira"
        ),
    ]


def test_root_collection_without_name_is_named_after_the_source(tmp_path: Path) -> None:
    write(tmp_path, "_meta.yaml", "description: everything\n")
    [root] = find_collections("memo", tmp_path, ALL)
    assert (root.name, root.folder, root.description, root.tags) == ("memo", "", "everything", ())


@pytest.mark.parametrize(
    "meta",
    [
        "name: [unclosed\n",  # broken YAML
        "- just\n- a list\n",  # not a mapping
        "",  # empty file
        "name: 42\ndescription: [not, text]\ntags: {a: 1}\n",  # wrong types
        "\ufeffname: [x\n",  # BOM + broken
    ],
)
def test_malformed_meta_is_tolerated(tmp_path: Path, caplog: pytest.LogCaptureFixture, meta: str) -> None:
    write(tmp_path, "a/b/_meta.yaml", meta)
    with caplog.at_level(logging.WARNING):
        [found] = find_collections("src", tmp_path, ALL)
    assert (found.name, found.description, found.tags, found.folder) == ("a/b", "", (), "a/b")


def test_invalid_utf8_meta_is_logged_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "_meta.yaml").write_bytes(b"name: \xff\xfe\n")
    with caplog.at_level(logging.WARNING):
        [found] = find_collections("src", tmp_path, ALL)
    assert found.name == "c"
    assert "_meta.yaml: malformed" in caplog.text


def test_names_are_unique_per_source(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path, "a/_meta.yaml", "name: shared\n")
    write(tmp_path, "b/_meta.yaml", "name: shared\n")
    write(tmp_path, "c/_meta.yaml", "name: b\n")  # claims the name that b falls back to
    write(tmp_path, "d/_meta.yaml", "name: b\n")
    with caplog.at_level(logging.WARNING):
        found = by_folder(find_collections("src", tmp_path, ALL))
    names = [c.name for c in found.values()]
    assert len(set(names)) == len(names) == 4
    assert found["a"].name == "shared"
    assert found["b"].name == "b"
    assert "already used" in caplog.text


def test_same_pruning_and_symlink_rules_as_the_scan(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root, "notes/c1/_meta.yaml", "name: c1\n")
    write(root, "archive/c2/_meta.yaml", "name: c2\n")  # outside `paths`: pruned
    write(root, "notes/.git/c3/_meta.yaml", "name: c3\n")  # .git is never entered
    write(tmp_path, "outside/c4/_meta.yaml", "name: c4\n")
    os.symlink(tmp_path / "outside", root / "notes" / "linked-out")
    os.symlink(root / "archive", root / "notes" / "linked-in")  # inside the root: followed
    write(tmp_path, "outside/_meta.yaml", "name: c5\n")
    (root / "notes" / "c5").mkdir()
    os.symlink(tmp_path / "outside/_meta.yaml", root / "notes" / "c5" / "_meta.yaml")
    found = find_collections("src", root, FileSelection(paths=("notes/**",)))
    assert sorted((c.name, c.folder) for c in found) == [("c1", "notes/c1"), ("c2", "notes/linked-in/c2")]


def test_walk_prunes_folders_outside_paths_and_excluded_ones(tmp_path: Path) -> None:
    for rel in ("notes/a.md", "notes/deep/b.md", "notes/drafts/c.md", "big/x/y.md", ".git/objects/z.md"):
        write(tmp_path, rel)
    scope = FileSelection(paths=("notes/**",), exclude=("notes/drafts/**",))
    assert [f.rel for f in walk_folders(tmp_path, scope)] == ["", "notes", "notes/deep"]
    assert [f.rel for f in walk_folders(tmp_path, ALL)] == ["", "big", "big/x", "notes", "notes/deep", "notes/drafts"]


def test_collection_for_picks_the_nearest_enclosing_folder() -> None:
    cols = [
        CollectionFolder("root", "", (), "s", ""),
        CollectionFolder("work", "", (), "s", "work"),
        CollectionFolder("jira", "", (), "s", "work/jira"),
        CollectionFolder("jira2", "", (), "s", "work/jira2"),
    ]
    assert collection_for("work/jira/notes.md", cols) == "jira"
    assert collection_for("work/jira2/a/b.md", cols) == "jira2"
    assert collection_for("work/jiraX.md", cols) == "work"  # a name prefix is not a folder
    assert collection_for("top.md", cols) == "root"
    assert collection_for("work/jira/notes.md", cols[1:]) == "jira"
    assert collection_for("life/x.md", cols[1:]) is None
    assert collection_for("x.md", []) is None


def test_duplicate_key_in_meta_is_logged_with_both_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Last-wins would silently name the collection `b`; the config's rule applies instead and
    the folder is kept under its own name, as for any malformed `_meta.yaml`."""
    meta = write(tmp_path, "dup/_meta.yaml", "name: a\ndescription: d\nname: b\n")
    write(tmp_path, "dup/n.md")
    with caplog.at_level(logging.WARNING):
        [found] = find_collections("src", tmp_path, ALL)
    assert (found.name, found.description, found.folder) == ("dup", "", "dup")
    [record] = [r for r in caplog.records if "_meta.yaml: malformed" in r.getMessage()]
    assert record.getMessage().endswith(f"{meta}: name: duplicate key (lines 1 and 3)"), record.getMessage()


def test_deeply_nested_meta_is_tolerated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path, "deep/_meta.yaml", "name: " + "[" * 5000 + "]" * 5000 + "\n")
    with caplog.at_level(logging.WARNING):
        [found] = find_collections("src", tmp_path, ALL)
    assert found.name == "deep" and "_meta.yaml: malformed" in caplog.text


@both_backends
def test_a_collection_spelled_with_nul_characters_is_indexed_alike_on_both_backends(
    do_sync: Callable[..., SyncReport], config: Config, notes: Path
) -> None:
    """YAML can spell a NUL; PostgreSQL text holds none. The name, description and tags keep a
    U+FFFD in its place on both stores, so the file rows name the same collection, a filter on
    that name finds its notes, and the next sync finds what it stored (and writes nothing)."""
    write(notes, "travel/_meta.yaml", 'name: "trips\\0abroad"\ndescription: "Cesty\\0a výlety"\ntags: ["a\\0b"]\n')
    report = do_sync()
    assert [s.error for s in report.sources] == [None]
    store = open_store(config.index_location)
    try:
        [row] = store.collections()
        assert (row.name, row.description, row.tags, row.files) == (
            "trips\ufffdabroad",
            "Cesty\ufffda výlety",
            ("a\ufffdb",),
            1,
        )
        hits = store.fts_search(keywords("кремль"), 10, SearchScope(collection=row.name))
        assert [store.chunk_rows([h.chunk_id])[h.chunk_id].path for h in hits] == ["travel/kazan.md"]
    finally:
        store.close()
    before = write_mark(config.index_location)
    assert not do_sync().changed
    assert write_mark(config.index_location) == before


def test_what_a_meta_file_got_wrong_is_handed_back_with_its_path(tmp_path: Path) -> None:
    """The scan yields these to the sync, which says them on stderr: the log alone goes unread."""
    write(tmp_path, "ok/_meta.yaml", "name: fine\n")
    write(tmp_path, "empty/_meta.yaml", "")
    write(tmp_path, "broken/_meta.yaml", "name: [unclosed\n")
    write(tmp_path, "listed/_meta.yaml", "- a\n- list\n")
    write(tmp_path, "twin/_meta.yaml", "name: fine\n")
    problems: list[CollectionProblem] = []
    found = by_folder(load_collections("src", walk_folders(tmp_path, ALL), problems=problems))
    assert found["twin"].name == "twin"
    by_path = {p.path: p.problem for p in problems}
    assert sorted(by_path) == ["broken/_meta.yaml", "listed/_meta.yaml", "twin/_meta.yaml"]
    assert by_path["broken/_meta.yaml"].startswith("malformed, the collection takes the folder's name: ")
    assert by_path["listed/_meta.yaml"] == "not a mapping, the collection takes the folder's name"
    assert by_path["twin/_meta.yaml"] == "collection name 'fine' is already used, this one is 'twin'"
