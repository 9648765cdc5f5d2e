"""Setting up from anywhere: config discovery (HOME and XDG_* in tmp_path), `init`, `config path`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from indexer.config import load_config
from indexer.configpaths import locate_config
from search import cli as cli_module
from tests.conftest import FAKE_EMBEDDING, assert_one_line_error


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder of our own, no XDG variables, no $NOTES_SEARCH_CONFIG, and a folder to stand in."""
    home = tmp_path / "home"
    (home / "elsewhere").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "NOTES_SEARCH_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(home / "elsewhere")
    return home


def cli(*args: str) -> Result:
    return CliRunner().invoke(cli_module.cli, list(args))


def test_discovery_order(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = home / ".config/notes-search/config.yaml"
    here = home / "elsewhere/notes-search.yaml"
    nothing = locate_config(None)
    assert not nothing.found and nothing.looked_at == (here, user)
    user.parent.mkdir(parents=True)
    user.write_text("sources: {}\n")
    assert locate_config(None).path == user and "user config" in locate_config(None).reason
    here.write_text("sources: {}\n")
    assert locate_config(None).path == here and "current folder" in locate_config(None).reason
    monkeypatch.setenv("NOTES_SEARCH_CONFIG", str(home / "env.yaml"))
    env = locate_config(None)
    assert env.path == home / "env.yaml" and "NOTES_SEARCH_CONFIG" in env.reason and not env.found
    assert locate_config("given.yaml").path == Path("given.yaml")
    assert "--config" in locate_config("given.yaml").reason


def test_xdg_config_home_is_honoured_and_a_relative_one_ignored(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    assert locate_config(None).looked_at[1] == home / "xdg/notes-search/config.yaml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/xdg")  # the XDG spec: ignore a relative path
    assert locate_config(None).looked_at[1] == home / ".config/notes-search/config.yaml"


def test_no_config_is_one_line_naming_both_places(home: Path) -> None:
    line = assert_one_line_error(
        cli("status"), "no config found", "notes-search.yaml", ".config/notes-search/config.yaml"
    )
    assert "notes-search init" in line


def test_init_writes_the_user_config_and_it_is_found_from_anywhere(home: Path) -> None:
    notes = home / "notes"
    (notes / "a").mkdir(parents=True)
    (notes / "a/x.md").write_text("# Okoun\n\nOkoun říční.\n", encoding="utf-8")
    result = cli("init", str(notes))
    assert result.exit_code == 0, result.output
    user = home / ".config/notes-search/config.yaml"
    assert str(user) in result.output and not (home / "elsewhere/notes-search.yaml").exists()
    config = load_config(user)
    data = home / ".local/share/notes-search"
    assert config.root == data
    assert config.db == data / "db/notes-index.sqlite" and config.log.is_relative_to(data)
    assert config.sources["notes"].root == notes
    # the written config is found from another folder, by every command
    path = cli("config", "path")
    assert path.exit_code == 0 and path.output.splitlines()[0] == str(user)
    assert "user config" in path.output
    as_json = json.loads(cli("config", "path", "--json").output)
    assert as_json["path"] == str(user) and as_json["exists"] is True
    again = cli("init", str(notes))
    assert again.exit_code == 1 and "already exists" in again.output


def test_init_honours_xdg_folders(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "cfg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    (home / "notes").mkdir()
    assert cli("init", str(home / "notes")).exit_code == 0
    config = load_config(home / "cfg/notes-search/config.yaml")
    assert config.db == home / "data/notes-search/db/notes-index.sqlite"


def test_init_here_and_explicit_config_keep_the_old_layout(home: Path) -> None:
    notes = home / "elsewhere/notes"
    notes.mkdir()
    assert cli("init", "--here", "notes").exit_code == 0
    here = load_config(home / "elsewhere/notes-search.yaml")
    assert here.db == home / "elsewhere/db/notes-index.sqlite" and here.sources["notes"].root == notes
    assert "notes: \n" not in (home / "elsewhere/notes-search.yaml").read_text()
    assert cli("-c", str(home / "other.yaml"), "init", "notes").exit_code == 0
    assert load_config(home / "other.yaml").db == home / "db/notes-index.sqlite"
    assert not (home / ".config").exists()


def test_config_path_without_a_config_exits_1(home: Path) -> None:
    result = cli("config", "path", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["exists"] is False and len(data["looked_at"]) == 2
    text = cli("config", "path")
    assert text.exit_code == 1 and "no config found" in text.stderr


def test_the_readme_quick_start_config_still_wins(home: Path) -> None:
    """`-c examples/notes-search.yaml` of the quick start, with a user config present too."""
    user = home / ".config/notes-search/config.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("sources: {}\n")
    example = Path(__file__).resolve().parent.parent / "examples/notes-search.yaml"
    located = json.loads(cli("-c", str(example), "config", "path", "--json").output)
    assert located["path"] == str(example) and located["exists"]


def test_a_real_process_finds_the_user_config(home: Path) -> None:
    """Through the installed entry point, with only HOME set: what a shell in another folder does."""
    user = home / ".config/notes-search/config.yaml"
    user.parent.mkdir(parents=True)
    notes = home / "notes"
    notes.mkdir()
    user.write_text(
        f"root: {home}/data\n{FAKE_EMBEDDING}sources:\n  workspace:\n    n: {{root: {notes}, paths: ['**']}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "NOTES_SEARCH_CONFIG"))}
    env["HOME"] = str(home)
    out = subprocess.run(
        [str(Path(sys.executable).with_name("notes-search")), "config", "path", "--json"],
        cwd=home / "elsewhere",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["path"] == str(user)
