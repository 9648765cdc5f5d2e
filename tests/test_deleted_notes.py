"""A note deleted since the last sync: no search returns it (the CLI in every shape, MCP through
the service), the answer still holds k hits, and `show` of it says what happened.

A search first catches up the workspace sources it can; here a sync holds the index lock, so it
cannot, and the index still has the deleted notes when the search reads it (as with a source
whose walk is over the search's budget)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner, Result

from indexer.config import load_config
from search import cli as cli_module
from search.mcp_server import NotesTools
from search.service import NotesService
from tests.conftest import make_config, sync_lock_held
from tests.fakes import FakeEmbedder

GONE = ("gone1.md", "gone2.md", "gone3.md")
STAYS = ("stays1.md", "stays2.md")


def run(config_path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli_module.cli, ["--config", str(config_path), *args], catch_exceptions=False)


def deleted_after_sync(config_path: Path, notes: Path, monkeypatch: object) -> None:
    """Three notes that rank first for `quokka` (the word three times), two that rank after
    them; the three are deleted after the sync, so the index still holds them."""
    monkeypatch.setattr(cli_module, "make_embedder", FakeEmbedder)  # type: ignore[attr-defined]
    for name in GONE:
        (notes / name).write_text(f"# {name}\n\nquokka quokka quokka\n", encoding="utf-8")
    for name in STAYS:
        (notes / name).write_text(f"# {name}\n\nA quokka among many other words in {name}.\n", encoding="utf-8")
    assert run(config_path, "sync").exit_code == 0
    for name in GONE:
        (notes / name).unlink()


def test_a_search_leaves_out_deleted_files_and_still_fills_k(config_path: Path, notes: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    deleted_after_sync(config_path, notes, monkeypatch)
    with sync_lock_held(load_config(config_path)):
        searches_while_a_sync_runs(config_path)


def searches_while_a_sync_runs(config_path: Path) -> None:
    result = run(config_path, "query", "quokka", "--mode", "lex", "-k", "2", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert sorted(hit["path"] for hit in data["results"]) == list(STAYS)  # asked again for what was lost
    assert "left out 3 files deleted since the last sync: notes:gone1.md, notes:gone2.md" in data["notice"]
    assert "notes-search sync" in data["notice"]

    text = run(config_path, "query", "quokka", "--mode", "lex")
    assert text.exit_code == 0 and "gone" not in text.stdout and "stays1.md" in text.stdout
    assert text.stderr.startswith("notice: ") and "; left out 3 files deleted since the last sync" in text.stderr

    for fmt in ("jsonl", "csv", "files"):
        shaped = run(config_path, "query", "quokka", "--mode", "lex", "--format", fmt)
        assert shaped.exit_code == 0 and "gone" not in shaped.stdout, fmt
    md = run(config_path, "query", "quokka", "--mode", "lex", "--format", "md").stdout
    headings = [line.split(". ", 1)[1] for line in md.splitlines() if line.startswith("## ")]
    assert sorted(headings) == list(STAYS)


def test_mcp_search_leaves_them_out_and_get_says_why(config_path: Path, notes: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    deleted_after_sync(config_path, notes, monkeypatch)
    tools = NotesTools(NotesService.from_config_file(str(config_path), embedder_factory=FakeEmbedder))
    with sync_lock_held(load_config(config_path)):
        answer = tools.search("quokka", None, 8, "hybrid")
    assert not any(hit["path"].startswith("gone") for hit in answer["results"])
    assert "deleted since the last sync" in answer["notice"]


def test_show_of_a_deleted_file_says_it_was_deleted_since_the_last_sync(
    config_path: Path, notes: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    deleted_after_sync(config_path, notes, monkeypatch)
    for ref in ("notes:gone1.md", "gone1.md", "gone1.md:3", "notes:gone1.md:3"):
        result = run(config_path, "show", ref)
        assert result.exit_code == 1, (ref, result.output)
        assert result.stderr.strip() == (
            "Error: notes:gone1.md: no such file: deleted since the last sync "
            "(the next `notes-search sync` drops it from the index)"
        ), ref
    never = run(config_path, "show", "never.md")  # never indexed: the plain error
    assert never.exit_code == 1 and "no such file in any source" in never.stderr
    assert run(config_path, "sync").exit_code == 0
    after = run(config_path, "show", "gone1.md")
    assert after.exit_code == 1 and "no such file in any source" in after.stderr


def test_a_source_whose_folder_is_away_is_searched_as_last_indexed(tmp_path: Path, notes: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A drive not mounted (its folder gone, or an empty mount point) is not every note deleted:
    every search failed with the sync's error; now the other sources answer, the away source's
    hits come from the index, and reading one says why it cannot be opened now."""
    usb = tmp_path / "usb"
    (usb / "trips").mkdir(parents=True)
    (usb / "trips" / "tatra.md").write_text("# Tatra\n\nquokka spotted on the ridge\n", encoding="utf-8")
    extra = f"    usb:\n      root: {usb}\n      paths: ['**']\n"
    config_path = make_config(tmp_path, notes, extra_sources=extra)
    deleted_after_sync(config_path, notes, monkeypatch)  # GONE are deleted from `notes`: still left out
    for away, why in ((lambda: shutil.rmtree(usb), "does not exist"), (lambda: usb.mkdir(), "is empty")):
        away()
        for scope in ((), ("--source", "usb")):
            result = run(config_path, "query", "quokka", "--mode", "lex", "-k", "10", "--json", *scope)
            assert result.exit_code == 0, result.output
            data = json.loads(result.stdout)
            paths = {(hit["source"], hit["path"]) for hit in data["results"]}
            assert ("usb", "trips/tatra.md") in paths and not paths & {("notes", name) for name in GONE}
            if not scope:
                assert {("notes", name) for name in STAYS} <= paths
            assert f"workspace source 'usb': folder {usb} {why}" in data["notice"]
            assert "its notes are searched as last indexed" in data["notice"]
            assert "usb:trips/tatra.md" not in data["notice"]  # not called deleted
        grep = json.loads(run(config_path, "grep", "quokka", "--json").stdout)
        assert {hit["source"] for hit in grep["results"]} == {"notes"}  # no match there is no answer
        assert [(item["source"], item["reason"]) for item in grep["unsearched"]] == [
            ("usb", f"workspace source 'usb': the folder {usb} {why} (a drive not mounted?)")
        ]
        shown = run(config_path, "show", "usb:trips/tatra.md")
        assert shown.exit_code == 1
        assert shown.stderr.strip() == (
            f"Error: usb:trips/tatra.md: cannot be read now: the folder {usb} {why} (a drive not mounted?)"
        )
    # emptied on purpose and synced so: nothing indexed is missing, grep searches it (and finds nothing)
    assert run(config_path, "sync", "--full", "--source", "usb").exit_code == 0
    grep = json.loads(run(config_path, "grep", "tatra", "--source", "usb", "--json").stdout)
    assert grep["results"] == [] and grep["unsearched"] == []
