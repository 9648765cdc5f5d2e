"""A password in the index URL never reaches a message, a JSON answer or the log, in any form:
raw, percent-encoded, decoded, or in the pieces libpq cuts an unencoded one into. No server is
needed: libpq fails on the URL (or the closed port) first and quotes what it read."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import ClientSession

from indexer.redaction import describe_url, redact
from search import cli as cli_module
from tests.conftest import make_config
from tests.embed_servers import free_port
from tests.test_mcp import NOTES_SEARCH, over_stdio, refused

# each with `%`, `@`, `:`, `/`, a space or non-ASCII; written into the URL raw or encoded
PASSWORDS = ["s3cret%PW", "Zq9@Kx7w", "Zq9:Kx7w/Pt4", "Zq9 Kx7w", "Zqöü9%zz", "Zq9%Kx@7w:Ft/4 ü"]


def _urls(password: str) -> list[str]:
    port = free_port()
    return [
        f"postgresql://me:{password}@127.0.0.1:{port}/notes?connect_timeout=2",
        f"postgresql://me:{quote(password, safe='')}@127.0.0.1:{port}/notes?connect_timeout=2",
        f"postgresql://me@127.0.0.1:{port}/notes?connect_timeout=2&password={quote(password, safe='')}",
        f"postgresql://me@127.0.0.1:{port}/notes?connect_timeout=2&password={password}",
    ]


def _leaks(text: str, password: str) -> list[str]:
    """The password's forms and pieces (two characters or more) found in `text`."""
    forms = {password, quote(password, safe=""), quote(password)}
    pieces = {p for p in re.split(r"[%@:/\s]", password) if len(p) >= 2}
    return sorted(f for f in forms | pieces if f in text)


@pytest.mark.parametrize("password", PASSWORDS)
def test_libpq_messages_are_redacted(password: str) -> None:
    """Whatever libpq says about the URL (a bad escape, a host cut at an unencoded `@`, a
    refused connection), the redacted text keeps no piece of the password."""
    for url in _urls(password):
        with pytest.raises(psycopg.Error) as failed:
            psycopg.connect(url)
        shown = redact(str(failed.value), url)
        assert not _leaks(shown, password), (url, str(failed.value), shown)
        assert not _leaks(describe_url(url), password)
        assert describe_url(url).startswith("postgresql://me@127.0.0.1:") and "/notes" in describe_url(url)


def test_other_urls_and_parameters_in_a_text_are_masked() -> None:
    text = "copy from postgresql://u:hunter2@db.lan/x failed; dsn host=db password='a b c' user=u"
    shown = redact(text)
    assert "hunter2" not in shown and "a b c" not in shown
    assert "postgresql://u:***@db.lan/x" in shown and "host=db" in shown and "user=u" in shown


# the URL pattern as a plain regex over the whole text: what `redact` must still mask
REFERENCE_URL_PASSWORD = re.compile(r"([A-Za-z0-9+.-]+://[^\s:/@'\"]*):[^\s'\"]*@")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab1+:/@ '\"\np", max_size=40))
def test_url_passwords_are_masked_as_the_plain_pattern_masks_them(text: str) -> None:
    assert redact(text) == REFERENCE_URL_PASSWORD.sub(r"\1:***@", text)  # no "password=" can be spelled


@pytest.mark.parametrize(
    "text",
    ["x" * 200_000, "a://u:" * 30_000, "a://" * 50_000, "password='" + "x" * 200_000, "a://u:" + "x" * 200_000],
)
def test_redacting_a_huge_argument_cannot_hang(text: str) -> None:
    """Every error line is redacted, and it quotes what was typed or sent: the URL pattern tried
    from every letter of a long word scanned the rest of it each time (17 s for 100,000
    characters, on the MCP server's only event loop). Linear now: milliseconds; the bound is a
    hang's, far above that."""
    started = time.monotonic()
    assert redact(f"unknown source {text!r}") == f"unknown source {text!r}"
    assert time.monotonic() - started < 5.0
    assert redact(f"see postgresql://me:pw@h/db {text}").startswith("see postgresql://me:***@h/db ")


def test_ipv6_hosts_and_queries_stay_as_written() -> None:
    assert (
        describe_url("postgresql://me:p@w@[::1]:5433/db?sslmode=require")
        == "postgresql://me@[::1]:5433/db?sslmode=require"
    )


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize(
    "command", [("status",), ("status", "--json"), ("query", "x"), ("query", "--json", "x"), ("sync",)]
)
def test_no_command_prints_the_password(tmp_path: Path, notes: Path, password: str, command: tuple[str, ...]) -> None:
    url = _urls(password)[0]  # raw: the hardest case, libpq quotes what it cannot parse
    config = make_config(tmp_path, notes, db=url.replace('"', '\\"'))
    result = CliRunner().invoke(cli_module.cli, ["--config", str(config), *command])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "me@127.0.0.1" in lines[0], lines
    if "%" in password or "@" in password or " " in password or "/" in password:
        assert "must be percent-encoded" in lines[0]
    assert not _leaks(result.output, password), result.output
    log = tmp_path / "notes-search.log"
    for written in [log, *tmp_path.glob("**/*.log")]:
        if written.exists():
            assert not _leaks(written.read_text(encoding="utf-8"), password)


def test_a_bad_escape_says_how_to_write_the_password(tmp_path: Path, notes: Path) -> None:
    config = make_config(tmp_path, notes, db="postgresql://postgres:s3cret%PW@/mydb")
    result = CliRunner().invoke(cli_module.cli, ["--config", str(config), "status"])
    assert result.exit_code == 1
    assert "must be percent-encoded" in result.stderr and "%25" in result.stderr
    assert "s3cret" not in result.output and "postgresql://postgres@/mydb" in result.stderr


@pytest.mark.parametrize("password", ["s3cret%PW", "Zq9@Kx7w/Pt4"])
@pytest.mark.sqlite_only("migrates the SQLite index to a URL")
def test_migrate_to_a_url_never_prints_its_password(
    config_path: Path, do_sync: Callable[..., object], password: str
) -> None:
    do_sync()
    for url in _urls(password)[:2]:  # raw: a usage error; encoded: the connection is refused
        result = CliRunner().invoke(cli_module.cli, ["--config", str(config_path), "migrate", "--to", url])
        assert result.exit_code in (1, 2) and "Error: " in result.stderr and "me@127.0.0.1" in result.stderr
        assert not _leaks(result.output, password), result.output


def test_the_log_masks_a_password_logged_by_any_path(tmp_path: Path, notes: Path) -> None:
    """The log formatter knows the index URL: even a record that carries it raw is masked."""
    import logging

    from indexer.config import load_config
    from search.logfile import ROOT_LOGGER, configure_log_file

    url = "postgresql://me:Zq9%25K%C3%BC@127.0.0.1:1/notes"
    config = load_config(make_config(tmp_path, notes, db=url))
    configure_log_file(config, create=True)
    logging.getLogger(ROOT_LOGGER + ".test").warning("failed: %s (token %r)", url, "Zq9%Kü")
    for handler in logging.getLogger(ROOT_LOGGER).handlers:
        handler.flush()
    text = config.log.read_text(encoding="utf-8")
    assert "failed: postgresql://me@127.0.0.1:1/notes" in text and "Zq9" not in text


@pytest.mark.parametrize("which", [1, 2])  # encoded in the user part, as a parameter
def test_mcp_tool_errors_never_carry_the_password(tmp_path: Path, notes: Path, which: int) -> None:
    password = "Zq9%Kx@7w:Ft/4 ü"
    config = make_config(tmp_path, notes, db=_urls(password)[which])
    answers: list[str] = []

    async def body(session: ClientSession) -> None:
        answers.append(await refused(session, "status"))
        answers.append(await refused(session, "search", query="x"))

    over_stdio(config, body, tmp_path / "mcp.err")
    for text in answers:
        assert "me@127.0.0.1" in text and not _leaks(text, password), text
    assert not _leaks((tmp_path / "mcp.err").read_text(encoding="utf-8"), password)


def test_mcp_refuses_to_start_on_an_unencoded_password_without_printing_it(tmp_path: Path, notes: Path) -> None:
    password = "Zq9%Kx@7w:Ft/4 ü"
    config = make_config(tmp_path, notes, db=_urls(password)[0])
    done = subprocess.run(
        [str(NOTES_SEARCH), "--config", str(config), "mcp"], stdin=subprocess.DEVNULL, capture_output=True, timeout=60
    )
    err = done.stderr.decode()
    assert (
        done.returncode == 1 and "must be percent-encoded" in err and not _leaks(err + done.stdout.decode(), password)
    )
