"""The service layer's own rules, which both front ends now share: one scope resolution with
per-source confinement, the catch-up of each place before a search, the `SOURCE:` prefix rule,
the JSON shapes of a source's sync report, and the state a front end (not a config read) owns."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from indexer.errors import NotesSearchError
from indexer.sync import SourceReport
from search import cli as cli_module
from search.cli.context import CliContext
from search.querybuild import MEANING_BYTES, meaning_text
from search.service import NotesService
from search.service.indexing import source_report_json
from search.service.scope import Place, narrow_to_prefix
from tests.conftest import FAKE_EMBEDDING, write
from tests.fakes import FakeEmbedder


@pytest.fixture
def two_sources(tmp_path: Path, db_url: str | None) -> Path:
    """Workspace sources `a` and `b`; in `a`, `shared` is a symlink out of its root, in `b` a folder."""
    (tmp_path / "outside").mkdir()
    write(tmp_path / "outside", {"secret.md": "# Secret\n\nnever indexed\n"})
    write(tmp_path / "a", {"devops/one.md": "# One\n\nalpha notes\n"})
    os.symlink(tmp_path / "outside", tmp_path / "a" / "shared")
    write(tmp_path / "b", {"devops/two.md": "# Two\n\nbeta notes\n", "shared/n.md": "# N\n\nshared note\n"})
    config = tmp_path / "notes-search.yaml"
    db_line = f'db: "{db_url}"\n' if db_url else ""
    config.write_text(
        f"root: {tmp_path}\n{db_line}{FAKE_EMBEDDING}sources:\n  workspace:\n"
        f"    a:\n      root: {tmp_path / 'a'}\n      paths: ['**']\n"
        f"    b:\n      root: {tmp_path / 'b'}\n      paths: ['**']\n",
        encoding="utf-8",
    )
    return config


def service_for(config: Path) -> NotesService:
    return NotesService.from_config_file(str(config), FakeEmbedder)


def test_reindex_takes_the_sources_that_admit_a_path_even_when_another_refuses_it(two_sources: Path) -> None:
    """`a:shared` escapes a's root, `b:shared` is a real folder: the refusal of one source no
    longer fails the other (the CLI used to stop at the first refusal)."""
    service = service_for(two_sources)
    service.sync(None, full=False, progress=None)
    write(two_sources.parent / "b", {"shared/new.md": "# New\n\nwritten just now\n"})
    outcome = service.reindex("shared", full=False, lock_wait=5.0)
    [run] = outcome.runs
    assert run.places == (Place("b", "shared"),)
    assert [(s.source_id, s.added) for s in run.report.sources] == [("b", 1)]
    assert outcome.target.label == "b:shared"
    with pytest.raises(NotesSearchError, match="resolves outside the source root"):
        service.reindex("a:shared", full=False, lock_wait=5.0)


def test_a_scoped_search_catches_up_every_place_of_its_target(two_sources: Path) -> None:
    service = service_for(two_sources)
    service.sync(None, full=False, progress=None)
    write(two_sources.parent / "a", {"devops/fresh.md": "# Fresh\n\nzebrafinch in a\n"})
    write(two_sources.parent / "b", {"devops/fresh.md": "# Fresh\n\nzebrafinch in b\n"})
    target = service.scope_from_options(("a", "b"), None, "devops")
    assert target.places == (Place("a", "devops"), Place("b", "devops")) and not target.is_all
    outcome = service.search("zebrafinch", target=target, k=5, mode="lex")
    assert sorted(hit.source for hit in outcome.response.results) == ["a", "b"]
    assert outcome.notices == ()
    # the whole index without a path: the workspace sources small enough to walk at once too
    write(two_sources.parent / "a", {"devops/later.md": "# Later\n\nquokka\n"})
    everything = service.scope_from_options((), None, None)
    found = service.search("quokka", target=everything, k=5, mode="lex")
    assert everything.is_all and [hit.source for hit in found.response.results] == ["a"]
    assert found.catch_up is not None and found.catch_up.caught_up == ("a", "b") and not found.catch_up.skipped
    # `--path .` names every source whole: caught up like a source
    write(two_sources.parent / "b", {"devops/later.md": "# Later\n\nquokka\n"})
    dot = service.search("quokka", target=service.scope_from_options((), None, "."), k=5, mode="lex")
    assert sorted(hit.source for hit in dot.response.results) == ["a", "b"] and dot.catch_up is None


def test_a_toc_byte_cap_is_shared_by_the_sources_in_order_and_the_files_stay_whole(two_sources: Path) -> None:
    """The cap an agent's `toc` asks for is the service's rule: one budget over the sources in
    order, each text cut at a whole line; the file on disk is refreshed whole either way."""
    service = service_for(two_sources)
    service.sync(None, full=False, progress=None)
    whole = service.toc(())
    first = len(whole[0].text.encode())
    capped = service.toc((), max_bytes=first + 40)
    assert [(t.source_id, t.truncated) for t in capped] == [("a", False), ("b", True)]
    assert capped[0].text == whole[0].text
    assert whole[1].text.startswith(capped[1].text) and capped[1].text.endswith("\n")
    assert 0 < len(capped[1].text.encode()) <= 40
    assert [t.file.read_text(encoding="utf-8") for t in capped] == [t.text for t in whole]
    assert [t.text for t in service.toc((), max_bytes=None)] == [t.text for t in whole]


def test_a_source_prefix_narrows_and_must_agree_with_the_sources_given() -> None:
    sources = {"notes": None, "other": None}
    assert narrow_to_prefix("other:devops", (), sources) == (("other",), "devops")
    assert narrow_to_prefix("devops/x.md", ("notes",), sources) == (("notes",), "devops/x.md")
    assert narrow_to_prefix("nosuch:x", (), sources) == ((), "nosuch:x")  # not a source id: part of the path
    with pytest.raises(NotesSearchError) as refused:
        narrow_to_prefix("other:dev\x1bops", ("notes",), sources)
    # the user's text is quoted with repr, so a control character arrives escaped
    assert str(refused.value) == ("--path 'other:dev\\x1bops' is in source 'other', which --source notes leaves out")


def test_one_source_report_has_a_sync_shape_and_a_reindex_shape() -> None:
    report = SourceReport(
        "notes",
        "workspace",
        added=1,
        skipped=1,
        skips=[("x.bin", "binary")],
        unreadable=[""],
        collection_problems=[("devops/_meta.yaml", "not a mapping")],
    )
    assert list(source_report_json(report)) == [
        "id",
        "kind",
        "added",
        "updated",
        "deleted",
        "touched",
        "skipped",
        "rev",
        "error",
        "unreadable",
        "recloned",
        "skips",
        "collection_problems",
        "front_matter_problems",
    ]
    assert source_report_json(report)["unreadable"] == ["./"]
    assert source_report_json(report)["skips"] == [{"path": "x.bin", "reason": "binary"}]
    assert source_report_json(report)["collection_problems"] == [
        {"path": "devops/_meta.yaml", "problem": "not a mapping"}
    ]
    shaped = source_report_json(report, place=Place("notes", "devops"), shape="reindex")
    assert list(shaped) == [
        *("id", "kind", "path", "added", "updated", "deleted", "skipped", "rev", "error", "unreadable", "recloned")
    ]
    assert shaped["unreadable"] == ["./"]  # an agent's reindex says what it could not read, as sync does
    assert shaped["path"] == "devops"
    assert source_report_json(report, place=Place("notes", ""), shape="reindex")["path"] is None


def test_reading_the_config_leaves_the_log_alone_until_the_service_starts(two_sources: Path) -> None:
    context = CliContext(str(two_sources), writes=True)
    log = context.config.log
    assert not log.parent.exists()  # a config read has no side effects
    context.service()
    assert log.parent.is_dir()  # a writing command's service opens (and may create) the log


def test_the_cli_builds_its_embedder_through_the_package_at_call_time(
    two_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[object] = []

    def fake(config: object) -> FakeEmbedder:
        built.append(config)
        return FakeEmbedder(config)  # type: ignore[arg-type]

    service = CliContext(str(two_sources)).service()
    monkeypatch.setattr(cli_module, "make_embedder", fake)  # replaced after the service was built
    result = CliRunner().invoke(cli_module.cli, ["--config", str(two_sources), "sync", "--quiet"])
    assert result.exit_code == 0, result.output
    service.embedder()
    assert len(built) == 2  # the command's service and the one built before the patch


def test_a_pasted_page_as_query_is_embedded_by_its_first_window_only(two_sources: Path) -> None:
    """A runaway query (a pasted page, 100k characters) used to be embedded whole, window after
    window, holding the embedder for minutes: the meaning half now reads its head, cut at a
    word, while the keyword half still reads all of it (its last word finds the note)."""
    asked: list[str] = []

    class Recording(FakeEmbedder):
        def embed_batch(self, texts: list[str], *, is_query: bool) -> Any:
            if is_query:
                asked.extend(texts)
            return super().embed_batch(texts, is_query=is_query)

    write(two_sources.parent / "b", {"devops/_meta.yaml": "name: devops\ndescription: servers and backups\n"})
    service = NotesService.from_config_file(str(two_sources), Recording)
    service.sync(None, full=False, progress=None)
    page = "lorem ipsum dolor " * 6000 + "beta"
    outcome = service.search(page, k=5, mode="hybrid")
    keyword = [hit.path for hit in outcome.response.results if hit.matched in ("keyword", "both")]
    assert keyword == ["devops/two.md"]
    service.route("servers " * 20000, k=2)
    assert len(asked) == 2
    for text in asked:
        assert len(text.encode()) <= MEANING_BYTES and text.endswith(("ipsum", "dolor", "lorem", "servers"))
    assert asked[0] == page[: len(asked[0])] and len(asked[0]) > MEANING_BYTES // 2
    short = "jak obnovit zálohu " * 50  # under the cap: read whole, as before
    service.search(short, k=5, mode="hybrid")
    assert asked[-1] == short


def test_meaning_text_keeps_short_queries_and_cuts_long_ones_at_a_word() -> None:
    assert meaning_text("wireguard peer") == "wireguard peer"
    exact = "x" * MEANING_BYTES
    assert meaning_text(exact) == exact
    unbroken = "y" * (MEANING_BYTES * 3)  # no word boundary to cut at: cut at the cap itself
    assert meaning_text(unbroken) == "y" * MEANING_BYTES
    lines = ("řádek " * 500 + "\n") * 5
    cut = meaning_text(lines)
    assert len(cut.encode()) <= MEANING_BYTES and lines.startswith(cut) and cut.endswith("řádek")
    # counted in UTF-8 bytes, whole characters kept: 4-byte emoji, 2-byte Cyrillic
    emoji = "🙂" * MEANING_BYTES
    assert meaning_text(emoji) == "🙂" * (MEANING_BYTES // 4)
    russian = "запись " * 400
    kept = meaning_text(russian)
    assert (
        russian.startswith(kept)
        and kept.endswith("запись")
        and MEANING_BYTES - 14 <= len(kept.encode()) <= MEANING_BYTES
    )
    odd = "x" + "é" * MEANING_BYTES  # the cap falls inside a 2-byte character: it is left out whole
    assert meaning_text(odd) == "x" + "é" * ((MEANING_BYTES - 1) // 2)
