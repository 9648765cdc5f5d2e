"""Shell completion through click's machinery, as a shell drives it: the installed entry point's
code in a subprocess with `_NOTES_SEARCH_COMPLETE` set. Source ids come from the config,
collections and refs from the index; with no config or no index, nothing, silently."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def complete(words: list[str], *, shell: str = "bash", cwd: Path, home: Path) -> tuple[list[str], str]:
    """What `notes-search WORDS… <Tab>` offers (the last word is the one being completed)."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "NOTES_SEARCH_CONFIG"},
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_RUNTIME_DIR": str(home / "run"),
        "_NOTES_SEARCH_COMPLETE": f"{shell}_complete",
        "COMP_WORDS": " ".join(["notes-search", *words]),
        # bash and zsh name the word's index; fish passes the half-typed word itself
        "COMP_CWORD": words[-1] if shell == "fish" else str(len(words)),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv.pop(1)); from search.warm import main; main()",
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line]  # no candidates: one empty line
    if shell == "bash":
        return [line.split(",", 1)[1] for line in lines], result.stderr
    return lines, result.stderr


@pytest.fixture
def synced(config_path: Path, notes: Path, do_sync: Callable[..., object]) -> Path:
    (notes / "devops" / "_meta.yaml").write_text("name: devops\ndescription: Servers and backups\n", encoding="utf-8")
    (notes / "cooking" / "_meta.yaml").write_text("name: cooking\ndescription: Bread and soups\n", encoding="utf-8")
    do_sync()
    return config_path


def test_sources_collections_and_refs_are_completed(synced: Path, tmp_path: Path) -> None:
    c = ["-c", str(synced)]
    home = tmp_path / "home"
    assert complete([*c, "query", "--source", ""], cwd=tmp_path, home=home)[0] == ["notes"]
    assert complete([*c, "grep", "x", "--source", "no"], cwd=tmp_path, home=home)[0] == ["notes"]
    assert complete([*c, "sync", "--source", "zz"], cwd=tmp_path, home=home)[0] == []
    assert complete([*c, "source", "remove", ""], cwd=tmp_path, home=home)[0] == ["notes"]
    assert complete([*c, "query", "--collection", ""], cwd=tmp_path, home=home)[0] == ["cooking", "devops"]
    assert complete([*c, "query", "-e", "x", "--collection", "d"], cwd=tmp_path, home=home)[0] == ["devops"]
    refs, stderr = complete([*c, "show", "notes:devops/"], cwd=tmp_path, home=home)
    assert refs == ["notes:devops/postgres.md", "notes:devops/zalohovani.md"] and stderr == ""
    # a bare path as `show` takes it; also what bash completes after the ':' it splits words at
    assert complete([*c, "show", "travel/"], cwd=tmp_path, home=home)[0] == ["travel/kazan.md"]
    assert complete([*c, "open", "notes:c"], cwd=tmp_path, home=home)[0] == ["notes:cooking/sourdough.md"]
    everything = complete([*c, "show", ""], cwd=tmp_path, home=home)[0]
    assert len(everything) == 4 and all(ref.startswith("notes:") for ref in everything)


def test_zsh_and_fish_get_the_same_candidates(synced: Path, tmp_path: Path) -> None:
    words = ["-c", str(synced), "query", "--collection", ""]
    zsh, _ = complete(words, shell="zsh", cwd=tmp_path, home=tmp_path / "home")
    assert zsh == ["plain", "cooking", "_", "plain", "devops", "_"]
    fish, _ = complete(words, shell="fish", cwd=tmp_path, home=tmp_path / "home")
    assert fish == ["plain,cooking", "plain,devops"]


def test_without_a_config_or_an_index_nothing_is_offered_and_nothing_printed(tmp_path: Path, config_path: Path) -> None:
    home = tmp_path / "home"
    for words in (
        ["query", "--source", ""],
        ["show", "notes:"],
        ["query", "--collection", ""],
        ["-c", str(tmp_path / "missing.yaml"), "show", ""],
    ):
        assert complete(words, cwd=tmp_path / "notes", home=home) == ([], ""), words
    # a config, but no sync yet: its sources are known, its files and collections not
    assert complete(["-c", str(config_path), "query", "--source", ""], cwd=tmp_path, home=home) == (["notes"], "")
    assert complete(["-c", str(config_path), "show", ""], cwd=tmp_path, home=home) == ([], "")
    assert complete(["-c", str(config_path), "query", "--collection", ""], cwd=tmp_path, home=home) == ([], "")
    broken = tmp_path / "broken.yaml"
    broken.write_text("sources: [unclosed\n", encoding="utf-8")
    assert complete(["-c", str(broken), "query", "--source", ""], cwd=tmp_path, home=home) == ([], "")


def test_the_shell_scripts_name_the_command(tmp_path: Path) -> None:
    for shell, needle in (("bash", "complete -o nosort -F"), ("zsh", "compdef"), ("fish", "complete --no-files")):
        env = {**os.environ, "_NOTES_SEARCH_COMPLETE": f"{shell}_source"}
        result = subprocess.run(
            [sys.executable, "-c", "from search.warm import main; main()"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
        )
        assert result.returncode == 0 and needle in result.stdout and "notes-search" in result.stdout, shell
