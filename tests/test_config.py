"""Config loading: the owner's original config file loads unchanged and means Ollama; errors name
file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.config import GitSource, WorkspaceSource, load_config, parse_config
from indexer.configpaths import find_config
from indexer.errors import ConfigError
from indexer.globs import FileSelection, match

# The owner's original config ("Konfigurace" in the first brief), verbatim: it must keep loading.
SEED_A = """\
embedding:
  endpoint: http://nvidia.hell:11434
  model: qwen3-embedding:0.6b       # tag psát VŽDY explicitně (latest = 8b, 4,7 GB)
  dims: 1024
  batch: 32
  keep_alive: -1                    # číslo, ne string ("-1" vrací HTTP 400)
  query_prefix: "Instruct: Given a web search query, retrieve relevant passages that answer the query\\nQuery: "

sources:
  git:
    travel:
      url: git@host:travel-notes.git
      mirror: tmp/mirrors/travel.git
      paths: ["**"]
      include: ["*.md"]
      exclude: []
    devops:
      url: https://host/devops-notes.git
      mirror: tmp/mirrors/devops.git
      paths: ["**"]
      include: ["*.md"]

  nanobot:
    workspace:
      paths: ["notes/**", "projects/**", "plans/**", "knowledge/**", "results/**", "cook/**"]
      include: ["*.md"]
      exclude: ["**/inbox/**"]      # rozpracované zachyty před compile
    develop:
      paths: ["develop/**"]
      include: ["*.md"]
      exclude: ["develop/history.md"]
"""


def test_seed_a_config_means_ollama(tmp_path: Path) -> None:
    config = parse_config(SEED_A, "seed-a.yaml", base=tmp_path)
    emb = config.embedding
    assert (emb.provider, emb.model, emb.dims, emb.batch) == ("ollama", "qwen3-embedding:0.6b", 1024, 32)
    assert emb.keep_alive == -1 and isinstance(emb.keep_alive, int)
    assert emb.endpoint == "http://nvidia.hell:11434"
    assert emb.query_prefix.startswith("Instruct: ") and emb.query_prefix.endswith("\nQuery: ")
    assert emb.passage_prefix == ""
    assert set(config.sources) == {"travel", "devops", "workspace", "develop"}
    travel = config.sources["travel"]
    assert isinstance(travel, GitSource) and travel.url == "git@host:travel-notes.git"
    assert travel.mirror == tmp_path / "tmp/mirrors/travel.git"
    develop = config.sources["develop"]
    assert isinstance(develop, WorkspaceSource) and develop.root == tmp_path
    assert develop.selection.admits("develop/knowledge.md") and not develop.selection.admits("develop/history.md")
    workspace = config.sources["workspace"]
    assert workspace.selection.admits("notes/a.md") and not workspace.selection.admits("notes/inbox/x.md")
    assert not workspace.selection.admits("tmp/clone/README.md")
    assert config.db == tmp_path / "db/notes-index.sqlite" and config.log == tmp_path / "log/notes_sync.log"


def test_defaults_are_the_local_model(tmp_path: Path) -> None:
    config = parse_config("sources:\n  workspace:\n    n: {root: notes, paths: ['**']}\n", "c.yaml", base=tmp_path)
    emb = config.embedding
    assert (emb.provider, emb.model, emb.dims) == ("local", "multilingual-e5-small", 384)
    assert (emb.query_prefix, emb.passage_prefix) == ("query: ", "passage: ")


def test_string_keep_alive_becomes_a_number() -> None:
    text = 'embedding: {endpoint: "http://x:1", model: "m:1", dims: 8, keep_alive: "-1"}\n'
    assert parse_config(text).embedding.keep_alive == -1
    text = 'embedding: {endpoint: "http://x:1", model: "m:1", dims: 8, keep_alive: "24h"}\n'
    assert parse_config(text).embedding.keep_alive == "24h"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("colour: red\n", "c.yaml: colour: unknown key"),
        ("embedding: {modle: x}\n", "c.yaml: embedding.modle: unknown key"),
        ("embedding: {provider: magic}\n", "c.yaml: embedding.provider: expected one of local, ollama, openai"),
        ("embedding: {provider: ollama, endpoint: 'http://x', dims: 8}\n", "c.yaml: embedding.model: required"),
        ("embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x'}\n", "c.yaml: embedding.dims: required"),
        ("embedding: {dims: 1024}\n", "c.yaml: embedding.dims: multilingual-e5-small has 384 dimensions"),
        ("embedding: {batch: 0}\n", "c.yaml: embedding.batch: expected an integer from 1 to 4096"),
        ("embedding: {batch: true}\n", "c.yaml: embedding.batch: expected an integer from 1 to 4096"),
        ("sources: {workspace: {n: {root: .}}}\n", "c.yaml: sources.workspace.n.paths: workspace sources are opt-in"),
        (
            "sources: {workspace: {n: {paths: ['../up/**']}}}\n",
            "c.yaml: sources.workspace.n.paths: glob must be relative",
        ),
        (
            "sources: {git: {a: {url: x}}, workspace: {a: {paths: ['**']}}}\n",
            "c.yaml: sources.workspace.a: source id 'a' is already used",
        ),
        ("sources: {git: {'a:b': {url: x}}}\n", "c.yaml: sources.git.a:b: source id must be"),
        ('sources: {workspace: {"a\\0b": {paths: ["**"]}}}\n', "c.yaml: sources.workspace.a\x00b: source id must be"),
        ("sources: {svn: {}}\n", "c.yaml: sources.svn: unknown key"),
        ("- just\n- a list\n", "c.yaml: expected a mapping"),
        ("sources: [unclosed\n", "c.yaml: invalid YAML (line 2, column 1)"),
        (
            "embedding: {provider: ollama, model: qwen3-embedding, endpoint: 'http://x', dims: 8}\n",
            "c.yaml: embedding.model: write the Ollama tag explicitly as name:tag (e.g. 'qwen3-embedding:0.6b'",
        ),
        (
            "embedding: {provider: ollama, model: 'hf.co/org/model', endpoint: 'http://x', dims: 8}\n",
            "c.yaml: embedding.model: write the Ollama tag explicitly",
        ),
        (
            "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://[::1', dims: 8}\n",
            "c.yaml: embedding.endpoint: not a valid URL ('http://[::1')",
        ),
        (
            "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://127.0.0.1:99999', dims: 8}\n",
            "c.yaml: embedding.endpoint: not a valid URL ('http://127.0.0.1:99999')",
        ),
        (
            "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://:8080', dims: 8}\n",
            "c.yaml: embedding.endpoint: not a valid URL: no host",
        ),
    ],
)
def test_bad_config_names_file_and_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.yaml")
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("db: a.sqlite\nlog: l.log\ndb: b.sqlite\n", "c.yaml: db: duplicate key (lines 1 and 3)"),
        (
            "sources:\n  workspace:\n    notes: {paths: ['**']}\n    other: {paths: ['**']}\n"
            "    notes: {paths: ['a/**']}\n",
            "c.yaml: sources.workspace.notes: duplicate key (lines 3 and 5)",
        ),
        ("embedding: {batch: 2, batch: 3}\n", "c.yaml: embedding.batch: duplicate key (lines 1 and 1)"),
        (
            "sources:\n  git:\n    r:\n      url: x\n      mirror: m.git\n      url: y\n",
            "c.yaml: sources.git.r.url: duplicate key (lines 4 and 6)",
        ),
    ],
)
def test_duplicate_keys_name_the_key_and_both_lines(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.yaml")
    assert str(info.value) == message


def test_merge_keys_may_be_overridden_and_aliases_are_checked_once() -> None:
    """`<<: *base` then an explicit key is an override on purpose, not a duplicate."""
    text = (
        "x-base: &base {paths: ['**'], include: ['*.md']}\n"
        "sources:\n  workspace:\n    a: {<<: *base, root: a}\n    b: {<<: *base, include: ['*.txt'], root: b}\n"
    )
    with pytest.raises(ConfigError, match="x-base: unknown key"):  # the anchor holder is not a config key
        parse_config(text, "c.yaml")
    config = parse_config(
        text.replace("x-base: &base {paths: ['**'], include: ['*.md']}\n", "").replace(
            "a: {<<: *base, root: a}", "a: &base {paths: ['**'], include: ['*.md'], root: a}"
        ),
        "c.yaml",
        base=Path("/r"),
    )
    assert config.sources["b"].selection.include == ("*.txt",)
    assert config.sources["a"].selection.include == ("*.md",)


def test_missing_file_and_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NOTES_SEARCH_CONFIG", raising=False)
    assert find_config(None) == tmp_path / "notes-search.yaml"
    monkeypatch.setenv("NOTES_SEARCH_CONFIG", "/etc/x.yaml")
    assert find_config(None) == Path("/etc/x.yaml")
    assert find_config("given.yaml") == Path("given.yaml")


def test_relative_paths_follow_root(tmp_path: Path) -> None:
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg/c.yaml").write_text(
        "root: ..\ndb: idx/x.sqlite\nsources:\n  git:\n    r: {url: repos/r}\n", encoding="utf-8"
    )
    config = load_config(tmp_path / "cfg/c.yaml")
    assert config.root == tmp_path
    assert config.db == tmp_path / "idx/x.sqlite"
    source = config.sources["r"]
    assert isinstance(source, GitSource) and source.url == str(tmp_path / "repos/r")
    assert source.mirror == tmp_path / "mirrors/r.git"


def test_a_postgres_url_held_in_a_variable_is_the_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`db: $NOTES_DB` holding the whole URL (a secret kept out of the file) means that server,
    not a SQLite file at root/postgresql:/..."""
    monkeypatch.setenv("NOTES_DB", "postgresql://me:pw@db.lan/notes")
    config = parse_config("db: $NOTES_DB\n", "c.yaml", base=tmp_path)
    assert config.db_url == "postgresql://me:pw@db.lan/notes"
    assert config.db == tmp_path / "db" / "notes-index.sqlite"
    monkeypatch.setenv("NOTES_DB", str(tmp_path / "x.sqlite"))
    assert parse_config("db: ${NOTES_DB}\n", "c.yaml", base=tmp_path).db == tmp_path / "x.sqlite"


@pytest.mark.parametrize(
    "db", ["mysql://me@db.lan/notes", "postgresq://me@db.lan/notes", "POSTGRESQL://me@db.lan/notes", "sqlite:///x.db"]
)
def test_a_url_that_is_not_postgres_is_a_config_error_not_a_file(tmp_path: Path, db: str) -> None:
    """Read as a file path, a typo'd or foreign URL would quietly build a SQLite index in a
    folder named after its scheme."""
    with pytest.raises(ConfigError, match=r"c\.yaml: db: .*postgresql://"):
        parse_config(f"db: {db}\n", "c.yaml", base=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("notes/**", "notes/a.md", True),
        ("notes/**", "notes/x/y/z.md", True),
        ("notes/**", "notesx/a.md", False),
        ("**/inbox/**", "inbox/a.md", True),
        ("**/inbox/**", "a/b/inbox/c.md", True),
        ("*.md", "deep/er/file.md", True),
        ("*.md", "file.mdx", False),
        ("a/*.md", "a/b/c.md", False),
        ("a/?.md", "a/b.md", True),
    ],
)
def test_globs(pattern: str, path: str, expected: bool) -> None:
    assert match(pattern, path) is expected


def test_scope_precedence_and_pruning() -> None:
    scope = FileSelection(paths=("develop/**",), exclude=("develop/history.md",))
    assert scope.admits("develop/x.md") and not scope.admits("develop/history.md") and not scope.admits("x.md")
    assert not scope.admits("develop/x.txt")
    assert scope.may_contain("") and scope.may_contain("develop/sub") and not scope.may_contain("notes")
    narrowed = scope.within("develop/sub")
    assert narrowed.admits("develop/sub/a.md") and not narrowed.admits("develop/a.md")
    assert not narrowed.may_contain("develop/other")


@pytest.mark.parametrize("name", ["~", "$HOME", "a$b", "~x", "${HOME}"])
@pytest.mark.parametrize("absolute", [False, True])
def test_init_root_means_exactly_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, absolute: bool
) -> None:
    """Path keys expand `~` and `$NAME`: `init` must write a folder named `~` or `$HOME` so it
    still means that folder, not the home directory."""
    from click.testing import CliRunner

    from search.cli import cli

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    notes = (work / name) if not absolute else (tmp_path / "elsewhere" / name)
    notes.mkdir(parents=True)
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    result = CliRunner().invoke(cli, ["init", "--here", str(notes) if absolute else f"./{name}"])
    assert result.exit_code == 0, result.output
    assert load_config(work / "notes-search.yaml").sources["notes"].root == notes


@pytest.mark.parametrize("source_id", ["yes", "null", "123", "1e3", "1.0", "true", "a.b", "_", "x-"])
def test_init_writes_the_source_id_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source_id: str
) -> None:
    """The id goes into YAML: written bare, `yes`, `123` or `1e3` became another key, and
    every later command failed on the file `init` had just written."""
    from click.testing import CliRunner

    from search.cli import cli

    (tmp_path / "notes").mkdir()
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["init", "--here", "--source-id", source_id])
    assert result.exit_code == 0, result.output
    assert list(load_config(tmp_path / "notes-search.yaml").sources) == [source_id]


# the config refuses the first four; the rest a command line would not carry unquoted
@pytest.mark.parametrize(
    "source_id", ["", "a:b", "x/y", "a\0b", "my notes", "#x", "[x]", '"q', "*a", "&a", "~", "x\x1b[31m"]
)
def test_init_refuses_a_source_id_the_config_would_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source_id: str
) -> None:
    from click.testing import CliRunner

    from search.cli import cli

    (tmp_path / "notes").mkdir()
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["init", "--here", "--source-id", source_id])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--source-id'" in result.stderr and "source id" in result.stderr
    assert not (tmp_path / "notes-search.yaml").exists()


@pytest.mark.parametrize("key", ["db", "log"])
def test_the_index_or_log_inside_the_notes_a_source_indexes_is_refused(tmp_path: Path, key: str) -> None:
    """Every sync writes them: inside a workspace source's notes they are writes into the user's
    folder (and a watcher would see each one)."""
    (tmp_path / "notes").mkdir()
    text = f"{key}: notes/.cache/x.file\nsources:\n  workspace:\n    n: {{root: notes, paths: ['**']}}\n"
    with pytest.raises(ConfigError, match=rf"c.yaml: {key}: .* lies inside the notes of source 'n'"):
        parse_config(text, "c.yaml", base=tmp_path)


def test_the_index_beside_notes_the_paths_leave_out_is_accepted(tmp_path: Path) -> None:
    """A workspace rooted at the config's folder that indexes only `notes/**` does not hold db/."""
    text = "sources:\n  workspace:\n    n: {paths: ['notes/**']}\n"
    config = parse_config(text, "c.yaml", base=tmp_path)
    assert config.db == tmp_path / "db" / "notes-index.sqlite"
    with pytest.raises(ConfigError, match=r"c.yaml: db: .* lies inside the notes of source 'n'"):
        parse_config(text.replace("notes/**", "**"), "c.yaml", base=tmp_path)


def test_init_here_inside_the_notes_folder_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from search.cli import cli

    notes = tmp_path / "notes"
    notes.mkdir()
    monkeypatch.chdir(notes)
    result = CliRunner().invoke(cli, ["init", "--here", "."])
    assert result.exit_code == 1
    assert "lies inside the notes of source 'notes'" in result.output
    assert "without --here" in result.output
    assert list(notes.iterdir()) == []


def test_a_longer_known_model_name_is_matched_before_a_part_of_it() -> None:
    from indexer.known_models import KNOWN_WINDOWS, known_window

    # the first entry found in a name counts: an entry that holds an earlier one would never be
    for earlier, (name, _) in enumerate(KNOWN_WINDOWS):
        assert not any(part in name for part, _ in KNOWN_WINDOWS[:earlier]), name
    # from the model cards
    assert known_window("openai", "nomic-ai/nomic-embed-text-v2-moe") == 512
    assert known_window("ollama", "nomic-embed-text-v2-moe:latest") == 512
    assert known_window("openai", "nomic-embed-text-v1.5") == 8192
    assert known_window("openai", "Snowflake/snowflake-arctic-embed-l-v2.0") == 8192
    assert known_window("openai", "snowflake-arctic-embed-m") == 512
    assert known_window("ollama", "paraphrase-multilingual:278m") == 128
    assert known_window("ollama", "all-minilm:22m") == 256
    assert known_window("ollama", "mxbai-embed-large:335m") == 512


SERVER = "embedding:\n  endpoint: http://127.0.0.1:9\n  model: {model}\n  dims: 8\n{extra}sources: {{}}\n"


def test_a_window_with_no_room_for_text_after_the_passage_prefix_is_refused() -> None:
    prefix = "Represent this document for retrieval of technical notes: "  # 60 characters
    text = SERVER.format(model="m:1", extra=f"  max_tokens: 16\n  passage_prefix: {prefix!r}\n")
    with pytest.raises(ConfigError) as refused:
        parse_config(text, "c.yaml")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("c.yaml: embedding.max_tokens: a window of 16 tokens")
    assert "max_tokens must be at least" in message
    # the model's own window is checked too: paraphrase-multilingual reads 128 tokens
    text = SERVER.format(model="paraphrase-multilingual:278m", extra=f"  passage_prefix: {prefix * 8!r}\n")
    with pytest.raises(ConfigError, match=r"embedding\.passage_prefix: a window of 128 tokens") as small:
        parse_config(text, "c.yaml")
    # a larger max_tokens would be cut by the server: only a shorter prefix helps
    assert "max_tokens must be" not in str(small.value)
    assert str(small.value).endswith("the prefix must be shorter (paraphrase-multilingual:278m reads 128 tokens)")
    # room for a few words is enough, and a short prefix leaves it in the smallest window
    assert parse_config(SERVER.format(model="m:1", extra="  max_tokens: 16\n"), "c.yaml").embedding.window == 16
    short = SERVER.format(model="m:1", extra="  max_tokens: 16\n  passage_prefix: 'passage: '\n")
    assert parse_config(short, "c.yaml").embedding.window == 16
