"""Path globs: the matcher agrees with the regex it replaced and its work stays bounded by the
pattern's segments times the path's length, whatever the pattern (no backtracking)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from indexer.config import parse_config
from indexer.errors import ConfigError, GlobError
from indexer.globs import MAX_GLOB_CHARS, MAX_GLOB_SEGMENTS, match, match_counting
from search import cli as cli_module
from tests.conftest import assert_one_line_error, make_config, write
from tests.fakes import FakeEmbedder


def reference_match(pattern: str, path: str) -> bool:
    """The regex translation the matcher replaced (exponential on hostile patterns, exact on
    small ones): the semantics to keep."""
    stripped = pattern.strip("/")
    segments = stripped.split("/")
    parts: list[str] = []
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]*/)*")
            continue
        body = "".join("[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch) for ch in segment)
        parts.append(body if last else body + "/")
    compiled = re.compile("".join(parts) + r"\Z", re.DOTALL)
    if "/" not in stripped and pattern != "**":
        path = path.rsplit("/", 1)[-1]
    return compiled.match(path) is not None


def bound(pattern: str, path: str) -> int:
    """The most work the matcher may do: every piece against every character of the path."""
    return (pattern.count("/") + 1) * (len(path) + path.count("/") + 1)


@settings(max_examples=600, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "*", "?", "**", ".", "", "a*b", "\n"]), min_size=1, max_size=5).map("/".join),
    st.lists(st.sampled_from(["a", "b", "ab", "ba", "", ".", "a\nb", "aab"]), min_size=1, max_size=6).map("/".join),
)
@example("**/inbox/**", "a/b/inbox/c.md")
@example("/a//b/", "a//b")
@example("**", "")
@example("", "")
@example("*a*a*b", "aaaab")
def test_the_matcher_agrees_with_the_regex_it_replaced(pattern: str, path: str) -> None:
    matched, work = match_counting(pattern, path)
    assert matched is reference_match(pattern, path)
    assert work <= bound(pattern, path)


MEETINGS = [f"meeting-notes-{n}.md" for n in range(1, 21)]


@pytest.mark.parametrize("stars", [12, 16, 40])
def test_many_stars_against_near_misses_read_each_name_once(stars: int) -> None:
    """`notes:************Q.md` took 21 s over 20 such files with the regex, 16 stars > 100 s."""
    pattern = "./" + "*" * stars + "Q.md"
    for name in MEETINGS:
        matched, work = match_counting(pattern, f"./{name}")
        assert not matched
        assert work <= 2 + len(name) + 2  # '.' then the name, each character read once
    assert match(pattern, "./meeting-Q.md")


@pytest.mark.parametrize("repeats", [8, 12, 20])
def test_repeated_double_stars_in_a_deep_folder_stay_bounded(repeats: int) -> None:
    deep = "/".join(f"d{i}" for i in range(40)) + "/x.md"
    pattern = "**/" * repeats + "y.md"
    matched, work = match_counting(pattern, deep)
    assert not matched and work <= bound(pattern, deep)
    assert work <= len(deep) + 41  # the `**` pieces read nothing; only the last reads the file name
    assert match(pattern, deep[: -len("x.md")] + "y.md")
    # stars inside the segments: still each (piece, folder) pair at most once
    starred = "*/" * 30 + "*y*.md"
    matched, work = match_counting(starred, deep)
    assert not matched and work <= bound(starred, deep)


def test_a_glob_past_the_caps_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(GlobError, match=f"at most {MAX_GLOB_CHARS}"):
        match("*" * (MAX_GLOB_CHARS + 1), "a.md")
    with pytest.raises(GlobError, match=f"at most {MAX_GLOB_SEGMENTS}"):
        match("a/" * MAX_GLOB_SEGMENTS + "b.md", "a.md")
    match("a/" * (MAX_GLOB_SEGMENTS - 1) + "b.md", "a.md")  # at the cap: fine
    with pytest.raises(ConfigError, match=r"c\.yaml: .*exclude.*segments"):
        parse_config(
            f"sources:\n  workspace:\n    n:\n      root: {tmp_path}\n      paths: ['**']\n      exclude: ['{'x/' * 40}y']\n",
            "c.yaml",
            base=tmp_path,
        )


def test_show_with_hostile_globs_answers_at_once(tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The red-team's `show` calls, end to end: an answer (no match), not a frozen process;
    a pattern past the cap is the command's one-line error."""
    write(notes, {f"meetings/{name}": "# Meeting\n" for name in MEETINGS})
    write(notes, {"/".join(f"d{i}" for i in range(40)) + "/x.md": "# Deep\n"})
    config_path = make_config(tmp_path, notes)
    monkeypatch.setattr(cli_module, "make_embedder", lambda config: FakeEmbedder(config))
    runner = CliRunner()

    def run(*args: str):  # type: ignore[no-untyped-def]
        return runner.invoke(cli_module.cli, ["--config", str(config_path), *args], catch_exceptions=False)

    assert run("sync").exit_code == 0
    for pattern in ["notes:meetings/" + "*" * 16 + "Q.md", "notes:" + "**/" * 12 + "y.md"]:
        result = run("show", pattern, "--json")
        assert result.exit_code == 1 and "no file matches" in json.dumps(json.loads(result.stdout))
    found = json.loads(run("show", "notes:" + "**/" * 12 + "x.md", "--json").stdout)
    assert [v["path"] for v in found["results"]] == ["/".join(f"d{i}" for i in range(40)) + "/x.md"]
    assert_one_line_error(run("show", "notes:" + "*" * (MAX_GLOB_CHARS + 1)), "glob is", "characters")
