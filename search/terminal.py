"""The CLI's output boundary: every human-readable line goes through `echo`, every error
through `safe_errors`, every JSON document through `echo_json`, so text from the notes (and
file names) never reaches the terminal as a control character. See indexer.safe_text."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from indexer.safe_text import safe_for_terminal, safe_json


class Safe(str):
    """Text already fit for the terminal: our own styling, or a control we send on purpose."""


def styled(text: str, **style: Any) -> Safe:
    """`click.style` of the escaped text: the style's own escape codes are the only ones left.
    Plain under NO_COLOR (no-color.org); click drops the codes itself when not on a terminal."""
    if os.environ.get("NO_COLOR"):
        return Safe(safe_for_terminal(text))
    return Safe(click.style(safe_for_terminal(text), **style))


def links_wanted(*, err: bool = False) -> bool:
    """OSC 8 hyperlinks only for a person at a terminal: never into a pipe or a file, never
    with NO_COLOR (it asks for plain output), never on TERM=dumb."""
    stream = sys.stderr if err else sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def file_url(path: str) -> str:
    """`file:///…` of an absolute path, percent-encoded: no control character survives in it."""
    return Path(path).as_uri()


def hyperlink(text: str | Safe, path: str | None, *, err: bool = False) -> Safe:
    """`text` (escaped unless already `Safe`) as an OSC 8 link to the file at `path`, when
    links_wanted; else the text alone, so a pipe gets exactly the unlinked output."""
    shown = text if isinstance(text, Safe) else safe_for_terminal(text)
    if path is None or not links_wanted(err=err):
        return Safe(shown)
    url = file_url(path)
    return Safe(f"\x1b]8;;{url}\x1b\\{shown}\x1b]8;;\x1b\\")


def echo(*parts: str, err: bool = False, nl: bool = True, multiline: bool = False) -> None:
    """Print the parts as one line (several only with `multiline`), escaping all but `Safe` parts."""
    click.echo(
        "".join(part if isinstance(part, Safe) else safe_for_terminal(part, multiline=multiline) for part in parts),
        err=err,
        nl=nl,
    )


def echo_json(data: object) -> None:
    """One JSON document: exact data, with no raw control character in the printed text."""
    click.echo(safe_json(json.dumps(data, ensure_ascii=False, indent=2)))


def echo_json_line(data: object) -> None:
    """One compact JSON document on one line (JSON lines), exact and printable like `echo_json`."""
    click.echo(safe_json(json.dumps(data, ensure_ascii=False)))


@contextmanager
def safe_errors() -> Iterator[None]:
    """`Error: ...` lines quote file names and refs: escape them (one line) like other output."""
    try:
        yield
    except click.ClickException as exc:
        # rewritten in place (click types it Final): every subclass formats its line around
        # `message`, and the usage text a UsageError prints keeps its context
        from indexer.redaction import redact  # on the error path only

        exc.message = safe_for_terminal(redact(exc.message))  # type: ignore[misc]
        raise
