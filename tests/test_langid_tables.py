"""The language identifier's tables kept uncompressed in the cache folder: written once, mapped
afterwards, rebuilt when damaged, shared by racing processes, and deciding exactly as py3langid's
own model does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from indexer import langid_tables, language
from indexer.langid_tables import cache_path, load_tables, tables_from_library

LANGUAGES = language.CANDIDATE_LANGUAGES
REPO = Path(__file__).resolve().parents[1]

# cs / en / ru queries as people type them (and a few the detector must leave UNKNOWN)
QUERIES = [
    "jak obnovit zálohu databáze",
    "kde mám uložené heslo k wifi",
    "nastavení síťového rozhraní v debianu",
    "proč nejde připojit disk",
    "recept na kváskový chléb",
    "co dělat když kvásek nekyne",
    "jak změnit výchozí shell",
    "how to restore the database from a backup",
    "why does my bread not rise",
    "set up wireguard on a raspberry pi",
    "list open ports on linux",
    "what is the capital of australia",
    "rotate logs with logrotate daily",
    "как восстановить базу данных из резервной копии",
    "почему не монтируется диск",
    "настройка сетевого интерфейса",
    "что взять в поход на байкал зимой",
    "книга о пришельцах",
    "как поменять оболочку по умолчанию",
    "backup",
    "PROJ-123",
    "Ctrl+Shift+I",
    "lvconvert --merge",
    "záloha backup резервная",
]


@pytest.fixture(scope="module")
def written_file() -> bytes:
    """The tables' file as load_tables writes it, from the session's cache folder (written there
    once): a test about damage starts from a copy instead of paying a decompression to make one."""
    load_tables(LANGUAGES)
    return cache_path(LANGUAGES).read_bytes()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    return folder / "notes-search"


def test_tables_are_written_once_then_mapped_without_py3langid(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = load_tables(LANGUAGES)
    path = cache_path(LANGUAGES)
    assert path.parent == cache and path.is_file()
    assert path.name.startswith("langid-0.") and path.stat().st_mode & 0o777 == 0o600

    def no_library(languages: tuple[str, ...]) -> langid_tables.Tables:
        raise AssertionError("the compressed model was read again")

    monkeypatch.setattr(langid_tables, "tables_from_library", no_library)
    mapped = load_tables(LANGUAGES)
    assert mapped.labels == written.labels
    for name in ("prior", "rows", "output", "table", "nextmove"):
        assert np.array_equal(getattr(mapped, name), getattr(written, name)), name


def test_the_cached_tables_decide_as_py3langids_model_on_a_fixed_query_list(cache: Path) -> None:
    from_library = language._Scorer(tables_from_library(LANGUAGES))
    load_tables(LANGUAGES)
    cached = language._Scorer(load_tables(LANGUAGES))
    samples = [" ".join(language.language_words(query)) or "x" for query in QUERIES]
    assert cached.probabilities(samples).tobytes() == from_library.probabilities(samples).tobytes()
    for sample in samples:  # the one-query path too
        assert cached.probabilities([sample]).tobytes() == from_library.probabilities([sample]).tobytes()
    # and py3langid's own labels: the likeliest candidate agrees on every query (100 %)
    identifier = langid_tables.library_identifier(LANGUAGES)
    assert [cached.labels[int(row.argmax())] for row in cached.probabilities(samples)] == [
        identifier.classify(sample)[0] for sample in samples
    ]


def test_detection_of_the_fixed_queries(cache: Path) -> None:
    found = [language.detect_query_language(query) for query in QUERIES]
    assert found[:7] == ["cs"] * 7 and found[7:13] == ["en"] * 6 and found[13:19] == ["ru"] * 6
    assert found[19:] == [language.UNKNOWN] * 5


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut short
        lambda data: b"",  # empty
        lambda data: b"not our file at all" * 10,
        lambda data: data[:40] + b"{" + data[41:],  # header not JSON any more
        # a byte of the checked arrays changed (the prior follows the header)
        lambda data: data[:4200] + bytes([data[4200] ^ 0xFF]) + data[4201:],
    ],
)
def test_a_damaged_file_is_ignored_and_written_again(cache: Path, written_file: bytes, damage: object) -> None:
    path = cache_path(LANGUAGES)
    path.write_bytes(written_file)
    good = load_tables(LANGUAGES)
    data = path.read_bytes()
    assert callable(damage)
    # a new file, as every writer makes one: cutting the mapped file short in place would crash
    # the process that maps it (SIGBUS), which is why the writer only ever renames a whole file
    path.unlink()
    path.write_bytes(damage(data))
    assert langid_tables._mapped(path) is None
    again = load_tables(LANGUAGES)
    assert path.read_bytes() == data
    assert np.array_equal(again.prior, good.prior) and again.labels == good.labels


def test_an_unwritable_cache_folder_only_costs_the_decompression(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the folder would be inside a file
    tables = load_tables(LANGUAGES)
    assert tables.labels == langid_tables.library_identifier(LANGUAGES).nb_classes
    assert not blocker.is_dir()


def test_the_model_files_digest_is_remembered_by_its_signature(cache: Path) -> None:
    first = cache_path(LANGUAGES)
    index = cache / "langid-models.json"
    known = json.loads(index.read_text())
    assert list(known.values()) == [first.name.split("-")[2]]
    # what the index says for this very file is believed (no rehash)...
    index.write_text(json.dumps(dict.fromkeys(known, "0123456789abcdef")))
    assert cache_path(LANGUAGES).name.split("-")[2] == "0123456789abcdef"
    # ...and an unreadable index is computed again
    index.write_text("[")
    assert cache_path(LANGUAGES) == first


def test_two_processes_racing_to_write_both_succeed(cache: Path) -> None:
    probe = (
        "from indexer import language\n"
        "print(language.detect_query_language('jak obnovit zálohu databáze'),"
        " language.detect_query_language('как восстановить базу данных'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        assert out.split() == ["cs", "ru"]
    assert langid_tables._mapped(cache_path(LANGUAGES)) is not None
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []  # no temporary left
