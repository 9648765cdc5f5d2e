"""The user's YAML kept parsed in the cache folder: a text parsed before is read back as it was
parsed, anything else (another text, a damaged file, data JSON would change, an error) is parsed
again, and a cache folder that cannot be written costs only the parse."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from indexer import useryaml
from indexer.errors import ConfigError
from indexer.useryaml import InvalidYaml, load_yaml

REPO = Path(__file__).resolve().parents[1]
TEXT = "name: Recepty\ndescription: vaření a pečení\ntags: [jídlo, 'chléb']\nweight: 1.5\nhidden: false\nnote:\n"
PARSED = {
    "name": "Recepty",
    "description": "vaření a pečení",
    "tags": ["jídlo", "chléb"],
    "weight": 1.5,
    "hidden": False,
    "note": None,
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "notes-search" / useryaml.FOLDER


def kept(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.json")) if cache.is_dir() else []


def test_a_text_parsed_before_is_read_back_from_the_cache(cache: Path) -> None:
    first = load_yaml(TEXT, "_meta.yaml")
    assert first == PARSED and list(first) == list(PARSED)  # keys in the order written
    [file] = kept(cache)
    assert json.loads(file.read_bytes()) == {"text": TEXT, "data": PARSED}
    # what the file says is what a later call returns: it does not parse the text again
    file.write_text(json.dumps({"text": TEXT, "data": {"name": "from the cache"}}), encoding="utf-8")
    assert load_yaml(TEXT, "_meta.yaml") == {"name": "from the cache"}


def test_a_file_of_another_text_or_a_damaged_one_is_parsed_again_and_replaced(cache: Path) -> None:
    load_yaml(TEXT, "_meta.yaml")
    [file] = kept(cache)
    for damaged in (
        json.dumps({"text": TEXT + "other: 1\n", "data": {"name": "stale"}}),  # another text
        '{"text": ',  # cut short
        json.dumps(["not", "ours"]),
        json.dumps({"text": TEXT}),  # no data
    ):
        file.write_text(damaged, encoding="utf-8")
        assert load_yaml(TEXT, "_meta.yaml") == PARSED
        assert json.loads(file.read_bytes()) == {"text": TEXT, "data": PARSED}


def test_data_json_would_change_is_parsed_every_time(cache: Path) -> None:
    dated = load_yaml("updated: 2026-12-07\n", "_meta.yaml")
    assert dated == {"updated": datetime.date(2026, 12, 7)}
    numbered = load_yaml("1: one\n", "_meta.yaml")  # a key that is not text
    assert numbered == {1: "one"}
    shared = load_yaml("base: &b {x: 1}\nfirst: *b\nsecond: *b\n", "_meta.yaml")  # anchors and aliases
    assert shared["first"] is shared["second"]
    deep = load_yaml("a: " + "[" * (useryaml.MAX_DEPTH + 1) + "]" * (useryaml.MAX_DEPTH + 1) + "\n", "_meta.yaml")
    assert isinstance(deep["a"], list)
    assert kept(cache) == []
    assert load_yaml("updated: 2026-12-07\n", "_meta.yaml") == dated  # and again: still a date


def test_errors_are_raised_every_time_and_never_kept(cache: Path) -> None:
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"^notes.yaml: db: duplicate key \(lines 1 and 3\)$"):
            load_yaml("db: a.sqlite\nlog: x.log\ndb: b.sqlite\n", "notes.yaml")
        with pytest.raises(InvalidYaml) as raised:
            load_yaml("name: [unclosed\n", "notes.yaml")
        assert (raised.value.line, raised.value.column) == (2, 1)
        assert raised.value.problem and raised.value.problem in str(raised.value)
        with pytest.raises(InvalidYaml, match="could not determine a constructor"):
            load_yaml("x: !!python/object/apply:os.system ['true']\n", "notes.yaml")
        with pytest.raises(InvalidYaml, match="special characters are not allowed"):
            load_yaml("name: a\x00b\n", "notes.yaml")
    assert kept(cache) == []


def test_a_cache_folder_that_cannot_be_written_costs_only_the_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the folder would be inside a file
    assert load_yaml(TEXT, "_meta.yaml") == PARSED
    assert load_yaml(TEXT, "_meta.yaml") == PARSED


def test_past_the_limit_the_oldest_half_goes(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(useryaml, "KEPT_FILES", 4)
    for number in range(5):
        load_yaml(f"n: {number}\n", "_meta.yaml")
        for file in kept(cache):  # each older than the one written after it
            os.utime(file, (file.stat().st_atime, file.stat().st_mtime - 10))
    left = {json.loads(file.read_bytes())["data"]["n"] for file in kept(cache)}
    assert left == {2, 3, 4}


def test_a_config_parsed_before_loads_no_pyyaml(cache: Path, tmp_path: Path) -> None:
    config = tmp_path / "notes-search.yaml"
    config.write_text("sources:\n  workspace:\n    notes:\n      root: notes\n      paths: ['**']\n", encoding="utf-8")
    child = (
        "import sys; from indexer.config import load_config; c = load_config(sys.argv[1]); "
        "print(sorted(c.sources), 'yaml' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [
        subprocess.run([sys.executable, "-c", child, str(config)], capture_output=True, text=True, env=env, check=True)
        for _ in range(2)
    ]
    assert [run.stdout for run in runs] == ["['notes'] True\n", "['notes'] False\n"]
