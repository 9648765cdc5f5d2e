"""Edit, then search: an unscoped search first catches up the workspace sources small enough to
walk at once, and says which it caught up and which it left (real CLI, real index, both stores)."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from indexer.config import WALKED_FILES_KEY, load_config, parse_config
from search import cli as cli_module
from search.service import catchup
from search.service.catchup import CatchUpChoice, choose_unscoped
from tests.conftest import FAKE_EMBEDDING, make_config, open_index, write
from tests.fakes import FakeEmbedder
from tests.pg import both_backends


@pytest.fixture
def big(tmp_path: Path) -> Path:
    root = tmp_path / "big"
    write(root, {f"n{i}.md": f"# Note {i}\n\nfiller {i}\n" for i in range(6)})
    return root


@pytest.fixture
def config_path(tmp_path: Path, notes: Path, big: Path, db_url: str | None) -> Path:
    return make_config(tmp_path, notes, extra_sources=f"    big: {{root: {big}, paths: ['**']}}\n", db=db_url)


@pytest.fixture
def run(config_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cli_module, "make_embedder", FakeEmbedder)

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli_module.cli, ["--config", str(config_path), *args], catch_exceptions=False)

    return invoke


def found(result: Result) -> list[str]:
    return [hit["path"] for hit in json.loads(result.stdout)["results"]]


@both_backends
@pytest.mark.parametrize("mode", ["hybrid", "lex"])
def test_an_unscoped_search_finds_an_edit_made_just_before(run, notes: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    assert run("sync").exit_code == 0
    with (notes / "travel/kazan.md").open("a", encoding="utf-8") as fh:
        fh.write("\nКазанский кот Барсик спит на вокзале.\n")
    write(notes, {"cooking/new.md": "# Okoun\n\nOkoun říční na másle.\n"})
    result = run("query", "Барсик", "--mode", mode, "--json", "--explain")
    assert found(result)[0] == "travel/kazan.md"
    assert json.loads(result.stdout)["explain"]["catch_up"] == {"caught_up": ["notes", "big"], "skipped": []}
    assert "cooking/new.md" in found(run("query", "okoun", "--mode", mode, "--json"))
    (notes / "cooking/new.md").unlink()
    assert "cooking/new.md" not in found(run("query", "okoun", "--mode", mode, "--json"))
    text = run("query", "Барсик", "--mode", mode, "--explain")
    assert "catch-up: caught up notes, big\n" in text.stdout


@both_backends
def test_a_source_over_the_budget_is_left_and_said_so(run, big: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    assert run("sync").exit_code == 0
    # room for the 4 notes, not for big's 6 files as well
    monkeypatch.setattr(catchup, "UNSCOPED_CATCH_UP_BUDGET", 5 * catchup.CATCH_UP_FILE_SECONDS)
    write(big, {"fresh.md": "# Fresh\n\nquokka\n"})
    result = run("query", "quokka", "--mode", "lex", "--json", "--explain")
    assert result.exit_code == 1 and found(result) == []  # not caught up: nothing found
    catch_up = json.loads(result.stdout)["explain"]["catch_up"]
    assert catch_up["caught_up"] == ["notes"]
    [skipped] = catch_up["skipped"]
    assert skipped["source"] == "big" and "6 files" in skipped["reason"] and "budget" in skipped["reason"]
    # a search scoped to it catches it up, as before
    assert found(run("query", "quokka", "--mode", "lex", "--source", "big", "--json")) == ["fresh.md"]


def test_the_choice_follows_the_recorded_file_counts() -> None:
    config = parse_config(
        f"{FAKE_EMBEDDING}sources:\n"
        "  git:\n    g: {url: /srv/g.git}\n"
        "  workspace:\n"
        "    a: {root: /a, paths: ['**']}\n"
        "    b: {root: /b, paths: ['**']}\n"
        "    c: {root: /c, paths: ['**']}\n"
        "    d: {root: /d, paths: ['**']}\n",
        base=Path("/"),
    )
    per_budget = int(catchup.UNSCOPED_CATCH_UP_BUDGET / catchup.CATCH_UP_FILE_SECONDS)
    meta = {WALKED_FILES_KEY + "a": str(per_budget - 10), WALKED_FILES_KEY + "b": "11", WALKED_FILES_KEY + "c": "5"}
    choice = choose_unscoped(config, meta)
    assert choice.caught_up == ("a", "c")  # b would overrun what a left; git sources are never walked
    assert [source for source, _ in choice.skipped] == ["b", "d"]
    assert "not walked whole yet" in dict(choice.skipped)["d"]
    assert choose_unscoped(config, {}) == CatchUpChoice((), tuple((s, dict(choice.skipped)["d"]) for s in "abcd"))


@both_backends
def test_a_whole_sync_records_each_workspace_file_count(run, config_path: Path, notes: Path) -> None:  # type: ignore[no-untyped-def]
    config = load_config(config_path)
    assert run("sync").exit_code == 0

    def counts() -> dict[str, str]:
        store = open_index(config, readonly=True)
        try:
            return {k: v for k, v in store.meta().items() if k.startswith(WALKED_FILES_KEY)}
        finally:
            store.close()

    assert counts() == {WALKED_FILES_KEY + "notes": "4", WALKED_FILES_KEY + "big": "6"}
    write(notes, {"a.md": "# A\n", "b.md": "# B\n"})
    (notes / "cooking/sourdough.md").unlink()
    assert run("reindex", "notes:cooking").exit_code == 0  # a scoped run counts nothing
    assert counts()[WALKED_FILES_KEY + "notes"] == "4"
    assert run("sync").exit_code == 0
    assert counts()[WALKED_FILES_KEY + "notes"] == "5"


class StepRecorder(FakeEmbedder):
    """Records the texts of each embedding step a catch-up takes."""

    def __init__(self, config: object = None) -> None:
        super().__init__()
        self.steps: list[list[str]] = []

    def embed_chunks(self, texts, on_batch=None):  # type: ignore[no-untyped-def]
        self.steps.append(list(texts))
        return super().embed_chunks(texts, on_batch)


def test_a_catch_up_embeds_in_steps_of_a_second_and_leaves_giants_to_the_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget (a second) is checked between steps: a step of 8 chunks of a long note took a
    search 23 s, and a giant chunk (a pasted log) takes minutes."""
    from indexer import sync as sync_module
    from indexer.sync import catch_up, run_sync
    from indexer.vectors import CATCH_UP_STEP_CHARS, GIANT_CHUNK_CHARS

    notes = tmp_path / "notes"
    write(notes, {"seed.md": "# Seed\n\nfirst\n"})
    config = load_config(make_config(tmp_path, notes))
    run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding))
    sections = "".join(f"## Part {i}\n\n" + f"slovo{i} " * 180 + "\n\n" for i in range(6))  # ~1,300 characters each
    write(notes, {"long.md": "# Long\n\n" + sections, "log.md": "# Log\n\n" + "x" * (GIANT_CHUNK_CHARS + 100) + "\n"})
    recorder = StepRecorder()
    monkeypatch.setattr(sync_module, "CATCH_UP_BUDGET", 0.0)  # the first step spends it
    assert "searchable" not in (catch_up(config, (), None, lambda: recorder) or "")
    [step] = recorder.steps
    assert len(step) == 1 or sum(map(len, step)) <= CATCH_UP_STEP_CHARS
    monkeypatch.setattr(sync_module, "CATCH_UP_BUDGET", 60.0)
    catch_up(config, (), None, lambda: recorder)  # all the rest, but the giant
    assert not any(len(text) > GIANT_CHUNK_CHARS for step in recorder.steps for text in step)
    assert all(len(step) == 1 or sum(map(len, step)) <= CATCH_UP_STEP_CHARS for step in recorder.steps)
    with closing(open_index(config)) as store:
        assert store.count_pending_all() == 1  # the giant, for the next sync
    run_sync(config, embedder_factory=lambda: recorder)
    assert any(len(text) > GIANT_CHUNK_CHARS for text in recorder.steps[-1])
