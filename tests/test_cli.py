"""The click CLI end to end (CliRunner, real config file, real SQLite, deterministic embedder)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from indexer.config import EmbeddingConfig, load_config
from search import cli as cli_module
from tests.conftest import assert_one_line_error, make_config, sync_lock_held, write
from tests.fakes import FakeEmbedder
from tests.pg import both_backends


class Embedders:
    """Hands the CLI a fake embedder; `down` makes it unreachable."""

    def __init__(self) -> None:
        self.down = False
        self.made: list[FakeEmbedder] = []

    def __call__(self, config: EmbeddingConfig) -> FakeEmbedder:
        embedder = FakeEmbedder(config)
        embedder.down = self.down
        self.made.append(embedder)
        return embedder


@pytest.fixture
def embedders(monkeypatch: pytest.MonkeyPatch) -> Embedders:
    factory = Embedders()
    monkeypatch.setattr(cli_module, "make_embedder", factory)
    return factory


@pytest.fixture
def run(config_path: Path, embedders: Embedders):  # type: ignore[no-untyped-def]
    runner = CliRunner()

    def invoke(*args: str, config: Path | None = config_path) -> Result:
        prefix = ["--config", str(config)] if config else []
        return runner.invoke(cli_module.cli, [*prefix, *args], catch_exceptions=False)

    return invoke


def query_json(run, *args: str) -> dict:  # type: ignore[no-untyped-def]
    result = run("query", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def paths(data: dict) -> list[str]:
    return [r["path"] for r in data["results"]]


@both_backends
def test_query_json_contract(run) -> None:  # type: ignore[no-untyped-def]
    assert run("sync").exit_code == 0
    data = query_json(run, "záloha databáze")
    assert set(data) == {"query", "mode", "degraded", "notice", "results"}
    assert data["mode"] == "hybrid" and data["degraded"] is False and data["notice"] is None
    hit = data["results"][0]
    assert set(hit) == {
        *("ref", "source", "path", "line", "end_line", "match_line", "breadcrumb", "score", "snippet", "text", "rev"),
        "matched",
        "file",  # the note on disk, for an editor
    }
    assert hit["matched"] in {"keyword", "meaning", "both"}
    assert hit["source"] == "notes" and hit["path"] == "devops/zalohovani.md"
    assert hit["line"] <= hit["match_line"] <= hit["end_line"] and hit["snippet"]
    assert hit["ref"] == f"notes:devops/zalohovani.md:{hit['line']}"  # what show / MCP get take
    assert hit["rev"] is None
    assert 1 <= hit["line"] <= hit["end_line"]
    assert hit["breadcrumb"].startswith("Zálohování serveru")


def test_query_json_echoes_a_long_query_cut(run) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    pasted = "záloha " * 20_000  # 160,000 bytes of UTF-8
    echoed = query_json(run, pasted, "--mode", "lex")["query"]
    assert echoed == "záloha " * 250 + "… [cut: the query has 160,000 bytes]"  # 2,000 bytes exactly
    md = run("query", pasted, "--mode", "lex", "--format", "md")
    assert md.exit_code == 0 and len(md.stdout.splitlines()[0].encode()) < 2100


def test_line_numbers_point_into_the_file(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    hit = query_json(run, "5432", "--mode", "lex")["results"][0]
    lines = (notes / hit["path"]).read_text(encoding="utf-8").splitlines()
    assert "5432" in "\n".join(lines[hit["line"] - 1 : hit["end_line"]])
    assert "5432" in lines[hit["match_line"] - 1] and "5432" in hit["snippet"]


@both_backends
def test_diacritics_and_prefixes(run) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    assert paths(query_json(run, "zaloha", "--mode", "lex"))[0] == "devops/zalohovani.md"
    write_more = query_json(run, "záloh*", "--mode", "lex")
    assert "devops/zalohovani.md" in paths(write_more)


@both_backends
def test_russian_query_finds_russian_note(run) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    assert paths(query_json(run, "поезд из Москвы", "--mode", "lex"))[0] == "travel/kazan.md"
    assert paths(query_json(run, "поезд Москвы"))[0] == "travel/kazan.md"


@both_backends
def test_exact_values_found_lexically(run) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    for value, path in [
        ("5432", "devops/postgres.md"),
        ("ERR_CONN_RESET", "devops/postgres.md"),
        ("db-01.lan", "devops/zalohovani.md"),
        ("RPO", "devops/zalohovani.md"),
    ]:
        assert paths(query_json(run, value, "--mode", "lex"))[0] == path, value


@both_backends
def test_modes_and_explain(run) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    for mode in ("lex", "vec", "hybrid"):
        data = query_json(run, "sourdough starter flour", "--mode", mode, "--explain")
        assert data["mode"] == mode
        assert paths(data)[0] == "cooking/sourdough.md", mode
        explain = data["results"][0]["explain"]
        assert (explain["bm25_rank"] is not None) == (mode != "vec")
        assert (explain["vec_rank"] is not None) == (mode != "lex")


def test_explain_names_the_query_language_and_the_vector_space(run) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    data = query_json(run, "jak zálohovat databázi na serveru", "--explain")
    assert data["explain"]["query_language"] == "cs"
    assert data["explain"]["vector_space"].startswith("language-neutral")
    assert all("language" in hit["explain"] for hit in data["results"])
    assert "explain" not in query_json(run, "jak zálohovat databázi na serveru")
    text = run("query", "jak zálohovat databázi na serveru", "--explain").output
    assert "query language cs; vectors language-neutral" in text
    # the similarity --min-similarity compares with, per hit that has one
    top = data["results"][0]["explain"]
    assert f"vec rank {top['vec_rank']}  similarity {top['similarity']}  rrf" in text
    lex = run("query", "zálohovat", "--mode", "lex", "--explain").output
    assert "vec rank -  similarity -  rrf" in lex
    assert query_json(run, "zálohovat", "--mode", "lex", "--explain")["explain"]["query_language"] is None


def test_k_limits_results(run) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    assert len(query_json(run, "a", "-k", "1", "--mode", "vec")["results"]) == 1


@both_backends
def test_scope_by_source_and_path(run) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    data = query_json(run, "server", "--path", "travel")
    assert data["results"] and all(p.startswith("travel/") for p in paths(data))
    data = query_json(run, "server", "--path", "notes:devops/postgres.md")
    assert set(paths(data)) == {"devops/postgres.md"}
    result = run("query", "x", "--source", "nope")
    assert result.exit_code == 2 and "unknown source 'nope'" in result.output


@both_backends
def test_degraded_when_embedder_down(run, embedders: Embedders) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    embedders.down = True
    result = run("query", "5432", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["degraded"] is True and "unreachable" in data["notice"]
    assert paths(data)[0] == "devops/postgres.md"
    assert "notice:" in result.stderr
    human = run("query", "5432")
    assert "keyword results only" in human.stderr and "notes:devops/postgres.md:3  " in human.stdout
    vec = run("query", "5432", "--mode", "vec")
    assert vec.exit_code == 1 and "unreachable" in vec.output


@both_backends
def test_pending_vectors_are_reported(run, embedders: Embedders, config_path: Path) -> None:  # type: ignore[no-untyped-def]
    embedders.down = True
    sync = run("sync")
    assert sync.exit_code == 0 and "warning:" in sync.stderr
    embedders.down = False
    with sync_lock_held(load_config(config_path)):  # a sync or the watcher is embedding them
        data = query_json(run, "5432")
        assert data["degraded"] is True and "a running sync is computing them" in data["notice"]
        assert "run `notes-search sync`" not in data["notice"]
    # nobody is: nothing changed on disk, so the search's own catch-up syncs nothing either
    data = query_json(run, "5432")
    assert data["degraded"] is True and "no vector yet (run `notes-search sync`)" in data["notice"]
    assert paths(data)[0] == "devops/postgres.md"
    run("sync")
    assert query_json(run, "5432")["degraded"] is False


def test_meta_guard_refuses_vector_search(run, tmp_path: Path, notes: Path) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    config = tmp_path / "notes-search.yaml"
    config.write_text(config.read_text().replace("dims: 64", "dims: 128").replace("fake:1", "fake:2"))
    refused = run("query", "5432", "--mode", "vec")
    assert refused.exit_code == 1
    assert "reindex needed" in refused.output and "fake:1" in refused.output and "fake:2" in refused.output
    # a hybrid query answers with its keywords and says why meaning is left out
    hybrid = run("query", "5432", "--json")
    assert hybrid.exit_code == 0
    data = json.loads(hybrid.stdout)
    assert data["degraded"] is True and "reindex needed" in data["notice"] and "fake:2" in data["notice"]
    assert paths(data)[0] == "devops/postgres.md"
    text = run("query", "5432")
    assert text.exit_code == 0 and "reindex needed" in text.stderr and "devops/postgres.md" in text.stdout
    assert run("query", "5432", "--mode", "lex").exit_code == 0
    status = json.loads(run("status", "--json").stdout)
    assert status["embedding"]["reindex_needed"]
    assert run("sync").exit_code == 0
    assert query_json(run, "5432")["results"]


@both_backends
def test_status_json(run, backend: str) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    data = json.loads(run("status", "--json").stdout)
    source = data["sources"][0]
    assert source["id"] == "notes" and source["kind"] == "workspace"
    assert source["files"] == 4 and source["chunks"] > 0 and source["pending"] == 0
    assert source["last_sync_at"] and source["indexed_rev"] is None
    assert data["embedding"]["model"] == "fake:1" and data["embedding"]["reindex_needed"] is None
    # a server's buffer pool beside what searches read; SQLite's pool is the OS's page cache
    memory = data["server_memory"]
    if backend == "sqlite":
        assert memory is None and "server memory" not in run("status").stdout
    else:
        assert memory["searched_bytes"] > 0 and memory["buffer_pool_bytes"] > 0
        assert "server memory: searches read" in run("status").stdout


@both_backends
def test_query_before_any_sync_is_a_clear_error(run) -> None:  # type: ignore[no-untyped-def]
    result = run("query", "x")
    assert result.exit_code == 1 and "run `notes-search sync` first" in result.output


def test_bad_config_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("embedding:\n  provider: local\n  modle: x\n")
    result = CliRunner().invoke(cli_module.cli, ["-c", str(bad), "status"])
    assert result.exit_code == 1
    assert "bad.yaml: embedding.modle: unknown key" in result.output
    assert len(result.output.strip().splitlines()) == 1
    broken = tmp_path / "broken.yaml"
    broken.write_text("sources: [unclosed\n")
    result = CliRunner().invoke(cli_module.cli, ["-c", str(broken), "status"])
    assert result.exit_code == 1 and "invalid YAML" in result.output


def test_usage_error_exit_2(run) -> None:  # type: ignore[no-untyped-def]
    assert run("query", "x", "--mode", "fuzzy").exit_code == 2
    assert run("query").exit_code == 2


def test_query_text_beginning_with_dash_by_e_or_after_double_dash(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    write(notes, {"devops/minio.md": "# MinIO\n\nStart it with --console-address :46699 for the console.\n"})
    assert run("sync").exit_code == 0
    for args in (["-e", "--console-address"], ["--", "--console-address"]):
        result = run("query", "--mode", "lex", "--json", *args)
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["query"] == "--console-address" and paths(data)[0] == "devops/minio.md"
    refused = run("query", "--console-address", ":46699")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert "No such option '--console-address'" in refused.stderr
    assert "query -- --console-address, or " in refused.stderr and "query -e --console-address" in refused.stderr
    twice = run("query", "-e", "a", "-e", "b")
    assert twice.exit_code == 2 and "-e given 2 times" in twice.stderr
    both = run("query", "-e", "a", "b")
    assert both.exit_code == 2 and "TEXT given twice" in both.stderr
    missing = run("query")
    assert missing.exit_code == 2 and "Missing argument 'TEXT' (or give it as -e TEXT)" in missing.stderr


def test_sync_quiet_and_json(run) -> None:  # type: ignore[no-untyped-def]
    result = run("sync", "--json")
    data = json.loads(result.stdout)
    assert data["sources"][0]["added"] == 4 and data["changed"] is True
    again = json.loads(run("sync", "--json").stdout)
    assert again["changed"] is False
    quiet = run("sync", "--quiet")
    assert quiet.exit_code == 0 and quiet.output == ""


def test_init_writes_a_working_config(tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli_module.cli, ["init", "--here", str(notes)])
    assert result.exit_code == 0, result.output
    config = load_config(tmp_path / "notes-search.yaml")
    assert config.embedding.provider == "local"
    assert config.sources["notes"].root == notes
    assert config.db == tmp_path / "db/notes-index.sqlite"
    again = CliRunner().invoke(cli_module.cli, ["init", "--here", str(notes)])
    assert again.exit_code == 1 and "already exists" in again.output
    (tmp_path / "notes-search.yaml").unlink()
    typo = CliRunner().invoke(cli_module.cli, ["init", "--here", str(tmp_path / "nope")])
    assert typo.exit_code == 1 and typo.stderr == f"Error: {tmp_path / 'nope'}: not a folder\n"
    monkeypatch.chdir(notes)  # no ./notes here: the default was never typed, so not "notes: not a folder"
    bare = CliRunner().invoke(cli_module.cli, ["init", "--here"])
    assert bare.exit_code == 1 and bare.stderr == (
        "Error: no folder 'notes' here (the default DIR): give your notes folder, `notes-search init DIR`\n"
    )


@both_backends
def test_edit_right_before_a_scoped_search_is_found(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    with (notes / "travel/kazan.md").open("a", encoding="utf-8") as fh:
        fh.write("\nКазанский кот Барсик спит на вокзале.\n")
    write(notes, {"travel/new.md": "# Nová poznámka\n\nOkoun říční chytaný na Lipně.\n"})
    data = query_json(run, "Барсик", "--path", "travel")
    assert paths(data)[0] == "travel/kazan.md"
    assert "Барсик" in data["results"][0]["text"]
    assert paths(query_json(run, "okoun Lipno", "--source", "notes"))[0] == "travel/new.md"
    (notes / "travel/new.md").unlink()
    assert "travel/new.md" not in paths(query_json(run, "okoun Lipno", "--path", "travel"))


def test_catch_up_skips_while_a_sync_holds_the_lock(run, notes: Path, config_path: Path) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    write(notes, {"travel/new.md": "# Nová\n\nOkoun říční.\n"})
    with sync_lock_held(load_config(config_path)):
        data = query_json(run, "okoun", "--path", "travel")
        assert data["notice"].endswith(
            "a sync is running: what changed on disk since it began is searchable once it ends"
        )
        assert "travel/new.md" not in paths(data)


def test_a_sync_on_a_terminal_says_another_one_runs(run, config_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Under cron a locked sync exits 0 in silence; a person who just committed a note and runs
    `sync` was told nothing either, and took the note for indexed."""
    run("sync")
    with sync_lock_held(load_config(config_path)):
        quiet = run("sync")
        assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")
        monkeypatch.setattr(cli_module, "stderr_is_terminal", lambda: True)
        told = run("sync")
        assert told.exit_code == 0 and told.stdout == ""
        assert told.stderr.startswith(f"another sync (pid {os.getpid()}) is running;"), told.stderr
        assert run("sync", "-q").stderr == ""


@both_backends
def test_reindex_a_folder_now(run, notes: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from search.service import catchup

    monkeypatch.setattr(catchup, "UNSCOPED_CATCH_UP_BUDGET", 0.0)  # the search below would catch devops/ up
    run("sync")
    write(notes, {"travel/new.md": "# Okoun\n\nOkoun říční.\n", "devops/new.md": "# Okoun v devops\n"})
    result = run("reindex", "notes:travel", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["sources"][0]["added"] == 1  # only travel/ was looked at
    found = paths(query_json(run, "okoun", "--mode", "lex"))
    assert "travel/new.md" in found and "devops/new.md" not in found
    assert run("reindex", "../outside").exit_code == 1


@both_backends
def test_status_of_a_path_and_disk_lag(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    data = json.loads(run("status", "notes:travel", "--json").stdout)
    (entry,) = data["sources"]
    assert (entry["path"], entry["files"]) == ("travel", 1)
    assert entry["lag"]["lags"] is False
    with (notes / "travel/kazan.md").open("a", encoding="utf-8") as fh:
        fh.write("\nnew line\n")
    entry = json.loads(run("status", "travel", "--json").stdout)["sources"][0]
    assert entry["lag"]["lags"] is True and entry["lag"]["paths"] == ["travel/kazan.md"]
    human = run("status", "travel")
    assert "lags" in human.stdout and "notes:travel" in human.stdout


def test_sync_under_cron_is_silent_and_logs(run, config_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run("sync")  # CliRunner's streams are not terminals, as under cron
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""
    log_text = load_config(config_path).log.read_text(encoding="utf-8")
    assert "source notes: +4 ~0 -0" in log_text and "sync done" in log_text


def test_progress_is_drawn_on_a_terminal(run, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cli_module, "stderr_is_terminal", lambda: True)
    result = run("sync")
    assert result.exit_code == 0
    assert "embed" in result.stderr and "notes: +4 ~0 -0" in result.stderr


def test_lazy_commands_resolve_and_stay_unloaded_until_named() -> None:
    import subprocess
    import sys

    import click

    ctx = click.Context(cli_module.cli)
    for name in cli_module.LAZY_COMMANDS:
        command = cli_module.cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name
    assert set(cli_module.LAZY_COMMANDS) <= set(cli_module.cli.list_commands(ctx))
    # a fresh interpreter: importing the CLI (what `sync` under cron pays) loads none of them
    modules = ", ".join(repr(spec.split(":")[0]) for spec in cli_module.LAZY_COMMANDS.values())
    probe = f"import sys, search.cli; print(sorted(m for m in sys.modules if m in {{{modules}}}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def error_line(result: Result) -> str:
    line = assert_one_line_error(result)
    assert line.startswith("Error: "), line
    return line


def test_query_path_is_normalised_and_must_exist(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("sync").exit_code == 0
    plain = paths(query_json(run, "port", "--mode", "lex", "--path", "devops"))
    assert plain and all(p.startswith("devops/") for p in plain)
    for spelling in ("./devops", "devops/", "devops/.", "notes:devops", "cooking/../devops"):
        assert paths(query_json(run, "port", "--mode", "lex", "--path", spelling)) == plain, spelling
    assert paths(query_json(run, "port", "--mode", "lex", "--path", "devops//postgres.md")) == ["devops/postgres.md"]
    assert "no such file or folder" in error_line(run("query", "port", "--path", "nope/x.md"))
    assert "no such collection" in error_line(run("query", "port", "--collection", "nope"))
    # a collection is named by its _meta.yaml: its folder's name gets the name it should take
    (notes / "devops" / "_meta.yaml").write_text("name: Ops\n", encoding="utf-8")
    assert run("sync").exit_code == 0
    assert paths(query_json(run, "port", "--mode", "lex", "--collection", "Ops")) == plain
    assert error_line(run("query", "port", "--collection", "devops")) == (
        "Error: --collection 'devops': no such collection; the folder 'devops' holds 'Ops'"
        " (`notes-search collections` lists them)"
    )
    (notes / "cooking" / "_meta.yaml").write_text("name: Vaření\n", encoding="utf-8")
    assert run("sync").exit_code == 0
    for typed in ("ops", "vareni", "Vaøení"):  # no capitals, no accents, a slip
        assert error_line(run("query", "port", "--collection", typed)) == (
            f"Error: --collection {typed!r}: no such collection; did you mean "
            f"{'Ops' if typed == 'ops' else 'Vaření'!r}? (`notes-search collections` lists them)"
        )
    assert "UTF-8" in error_line(run("query", "port", "--path", "caf\udce9.md"))


def test_source_prefix_narrows_within_source_option(
    tmp_path: Path, notes: Path, embedders: Embedders, db_url: str | None
) -> None:
    other = tmp_path / "other"
    write(other, {"devops/extra.md": "# Extra\n\nport 8080 on the other side\n"})
    config = make_config(
        tmp_path, notes, extra_sources=f"    other:\n      root: {other}\n      paths: ['**']\n", db=db_url
    )
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli_module.cli, ["--config", str(config), *args], catch_exceptions=False)

    assert run("sync").exit_code == 0
    both = json.loads(run("query", "port", "--mode", "lex", "--path", "devops", "--json").stdout)
    assert {r["source"] for r in both["results"]} == {"notes", "other"}
    narrowed = json.loads(run("query", "port", "--mode", "lex", "--path", "other:devops", "--json").stdout)
    assert {r["source"] for r in narrowed["results"]} == {"other"}
    assert "leaves out" in error_line(run("query", "port", "--source", "notes", "--path", "other:devops"))
    assert "leaves out" in error_line(run("grep", "port", "--source", "notes", "--path", "other:devops"))
    grep = json.loads(run("grep", "port", "--path", "other:devops", "--json").stdout)
    assert {hit["source"] for hit in grep["results"]} == {"other"}


def test_reindex_refuses_paths_outside_or_missing(run) -> None:  # type: ignore[no-untyped-def]
    assert run("sync").exit_code == 0
    assert "no such file or folder" in error_line(run("reindex", "nope/x.md"))
    assert "absolute" in error_line(run("reindex", "/etc"))
    ok = run("reindex", "devops", "--json")
    assert ok.exit_code == 0, ok.output


@both_backends
def test_status_shows_chunks_per_language(run) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    data = json.loads(run("status", "--json").stdout)
    (source,) = data["sources"]
    assert sum(source["languages"].values()) == source["chunks"]
    assert data["languages"] == source["languages"]
    assert source["languages"].get("ru", 0) >= 1 and source["languages"].get("cs", 0) >= 1
    counts = list(source["languages"].values())
    assert counts == sorted(counts, reverse=True)  # largest first
    travel = json.loads(run("status", "notes:travel", "--json").stdout)
    assert travel["languages"] == travel["sources"][0]["languages"] == {"ru": travel["sources"][0]["chunks"]}
    human = run("status").stdout
    expected = ", ".join(f"{lang} {n}" for lang, n in data["languages"].items())
    assert f"languages: {expected}" in human and f"    languages: {expected}" in human


def test_sync_says_which_meta_file_it_could_not_take_as_written(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    """Not only in the log: cron mails stderr, and a typo only renames the collection otherwise."""
    (notes / "devops" / "_meta.yaml").write_text("name: [DevOps\n", encoding="utf-8")
    result = run("sync")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "_meta.yaml" in line]
    assert len(lines) == 1 and lines[0].startswith(
        "warning: notes: devops/_meta.yaml: malformed, the collection takes the folder's name: "
    ), result.stderr
    again = json.loads(run("sync", "--json").stdout)  # said at every sync until it is mended
    [source] = again["sources"]
    assert [p["path"] for p in source["collection_problems"]] == ["devops/_meta.yaml"]
    assert "_meta.yaml" not in run("sync", "--quiet").stderr
    (notes / "devops" / "_meta.yaml").write_text("name: DevOps\n", encoding="utf-8")
    mended = run("sync")
    assert "_meta.yaml" not in mended.stderr
    assert json.loads(run("sync", "--json").stdout)["sources"][0]["collection_problems"] == []


def test_a_command_typed_whole_finds_the_note_that_holds_it_first(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    """`journalctl --vacuum-size=50M` as typed: the note holding it comes first in both modes,
    though another note holds every word of it, more often, apart; --explain says why."""
    write(
        notes,
        {
            "ops/journal-size.md": "# Journal size\n\nKeep the journal small: `journalctl --vacuum-size=50M`.\n\n"
            + "The home server keeps its logs on the small system disk. " * 12,
            "ops/journalctl.md": "# journalctl\n\njournalctl --vacuum-size=1G or --vacuum-time=50M: journalctl "
            "vacuum options trim the journal by size or by time; journalctl vacuum size, journalctl again.\n",
        },
    )
    run("sync")
    for mode in ("hybrid", "lex"):
        data = query_json(run, "journalctl --vacuum-size=50M", "--mode", mode, "--explain")
        assert data["results"][0]["path"] == "ops/journal-size.md", paths(data)
        assert [hit["explain"]["verbatim"] for hit in data["results"]][:2] == [True, False]
    plain = query_json(run, "journalctl vacuum size", "--mode", "lex", "--explain")  # not code: BM25 decides
    assert plain["results"][0]["path"] == "ops/journalctl.md"
    assert not any(hit["explain"]["verbatim"] for hit in plain["results"])
    text = run("query", "journalctl --vacuum-size=50M", "--explain").output
    assert "holds the whole query as typed (a command or value): placed first" in text


def test_explain_says_when_a_meaning_hit_took_another_ones_place() -> None:
    """The `why:` line of a hit found by meaning alone that fusion.single_list_order moved."""
    from search.cli.query import _why
    from search.engine import SearchResponse

    response = SearchResponse(query="во что одеться", mode="hybrid", rrf_k=60)
    response.keyword_weight, response.meaning_weight = 0.0816, 1.0
    explain: dict[str, float | int | str | None] = {"vec_rank": 2, "vec_part": 1 / 62, "rrf": 1 / 62}
    assert _why(response, {**explain, "place": None}) == "keyword - + meaning 1/(60+2) = 0.016129"
    assert _why(response, {**explain, "place": 0.016285}) == (
        "keyword - + meaning 1/(60+2) = 0.016129; shown in a place scored 0.016285:"
        " hits found by meaning alone keep the meaning half's order among themselves"
    )


def test_explain_says_when_another_languages_keyword_rank_gave_way_to_its_imputed_one() -> None:
    from search.cli.query import _why
    from search.engine import SearchResponse

    response = SearchResponse(query="velikost souborů LFS", mode="hybrid", rrf_k=60)
    response.keyword_weight, response.meaning_weight = 0.25, 1.0
    imputed = {"vec_rank": 1, "vec_part": 1 / 61, "bm25_counted_rank": 2, "bm25_part": 0.25 / 62}
    assert _why(response, {**imputed, "bm25_rank": None}) == (
        "keyword 0.25/(60+2) = 0.004032 (another language: counted at twice its meaning rank) + meaning 1/(60+1) = 0.016393"
    )
    assert _why(response, {**imputed, "bm25_rank": 10}) == (
        "keyword 0.25/(60+2) = 0.004032 (another language: found at 10, counted at twice its meaning rank)"
        " + meaning 1/(60+1) = 0.016393"
    )
    # no language named, another script (engine.other_language)
    assert _why(response, {**imputed, "bm25_rank": 22, "language": "unknown"}) == (
        "keyword 0.25/(60+2) = 0.004032 (another script: found at 22, counted at twice its meaning rank)"
        " + meaning 1/(60+1) = 0.016393"
    )


def test_explain_says_what_each_half_added(run) -> None:  # type: ignore[no-untyped-def]
    run("sync")
    question = "jak zálohovat databázi na serveru"
    data = query_json(run, question, "--explain", "-k", "20")
    assert data["explain"]["rrf_k"] == 60 and data["explain"]["exact_value"] is False
    weight = data["explain"]["keyword_weight"]
    assert weight == pytest.approx(data["explain"]["keyword_coverage"] ** 2, abs=1e-4)
    meaning = data["explain"]["meaning_weight"]
    assert 0 <= meaning <= 1
    assert data["explain"]["catch_up"] is not None  # unscoped: which workspace sources it caught up
    scoped = query_json(run, question, "--explain", "--source", "notes")
    assert "catch_up" in scoped["explain"] and scoped["explain"]["catch_up"] is None  # the key stays
    hits = [hit["explain"] for hit in data["results"]]
    # the hits taken for background are marked, each one the keyword half could not see
    background = [e for e in hits if e["background"]]
    assert background and len(background) <= data["explain"]["background"], hits
    assert all(e["keyword_blind"] and e["bm25_rank"] is None for e in background)
    assert all(e["background"] is False for e in hits if not e["keyword_blind"])
    for e in hits:  # the fused score is the sum of the halves' parts
        assert e["rrf"] == pytest.approx((e["bm25_part"] or 0) + (e["vec_part"] or 0), abs=2e-6)
        if e["bm25_rank"] is not None:  # at its rank, or another language's at its imputed one if better
            rank = e["bm25_counted_rank"] or e["bm25_rank"]
            assert rank <= e["bm25_rank"]
            assert e["bm25_part"] == pytest.approx(weight / (60 + rank), abs=1e-6)
        if e["vec_rank"] is not None:  # at its rank, or where other languages' background was passed over
            rank = e["vec_counted_rank"] or e["vec_rank"]
            assert e["vec_part"] == pytest.approx(meaning / (60 + rank), abs=1e-6)
    blind = [e for e in hits if e["keyword_blind"]]
    assert blind, hits  # the English notes are in play
    for e in blind:  # taken as ranked by the keyword half at twice the meaning rank
        assert e["bm25_rank"] is None and e["bm25_counted_rank"] == 2 * e["vec_rank"]
    # a hit found by meaning alone may take the place of another (fusion.single_list_order): the
    # score shown is its place's, so with no verbatim or identifier term the hits' scores fall
    for hit in data["results"]:
        e = hit["explain"]
        assert hit["score"] == (e["rrf"] if e["place"] is None else e["place"])
        assert e["place"] is None or e["bm25_rank"] is None
    scores = [hit["score"] for hit in data["results"]]
    assert scores == sorted(scores, reverse=True)
    text = run("query", question, "--explain", "-k", "20").output
    assert text.count("\n    why: ") == len(hits)
    assert f"keyword weight {weight:g} (its best note holds" in text
    assert "(another language: counted at twice its meaning rank)" in text
    assert (f"; meaning weight {meaning:g} (its first hit stands out little" in text) == (meaning < 1)
    lex = run("query", "zálohovat", "--mode", "lex", "--explain").output
    assert "    why: keyword 1/(60+1) = 0.016393\n" in lex
