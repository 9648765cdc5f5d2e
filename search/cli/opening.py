"""`open`: a hit in the user's editor, at its line."""

from __future__ import annotations

import os
import sys

import click

from search.cli.context import CliContext, pass_context
from search.cli.options import completes
from search.refs import Ref
from search.terminal import echo

FALLBACK_EDITOR = "vi"
# Editors that take `+N` as the name of a file to create (VS Code opened an empty "+18" beside
# the note): each gets the line as it reads one; every other editor gets `+N FILE`.
GOTO_FLAG = ("code", "code-insiders", "codium", "cursor", "windsurf")  # -g FILE:LINE
FILE_COLON_LINE = ("subl", "sublime_text", "zed", "hx", "helix")  # FILE:LINE


@click.command(name="open")
@click.argument("target", metavar="REF|RANK", shell_complete=completes("ref"))
@pass_context
def open_command(context: CliContext, target: str) -> None:
    """Open a note in $VISUAL or $EDITOR (else vi) at its line (`+N`; VS Code `-g FILE:N`, Sublime/Zed/Helix `FILE:N`).

    REF is [SOURCE:]PATH[:LINE] (a hit's ref, or an absolute path inside a source); RANK is a
    hit of this config's last `query` (1 is the best). Workspace notes open in place; a git
    source's note opens in its `checkout:` when the config names one, else as a read-only copy
    of the indexed version in a temporary folder (said on stderr). Exits with the editor's code.
    """
    service = context.service()
    ref = target
    if target.lstrip("-").isdigit():  # a file named "3" is written with its source: notes:3
        rank = int(target)
        if rank < 1:
            raise click.BadParameter(f"ranks start at 1, got {rank}", param_hint="RANK")
        ref = service.remembered_ref(rank)
    opened = service.locate(ref)
    rev = (opened.rev or "")[:12]
    if opened.copy:
        echo(
            f"notice: {Ref(opened.source_id, opened.path)}: a read-only copy of the indexed version (rev {rev}; "
            f"source {opened.source_id} has no checkout: in the config): {opened.file}",
            err=True,
        )
    elif opened.differs:
        echo(
            f"notice: {opened.file} differs from the indexed version (rev {rev}): the hit's line may have moved",
            err=True,
        )
    import signal
    import subprocess  # here, not at the top: `--help` imports every command module

    command = with_file(editor_command(), str(opened.file), opened.line)
    # Ctrl-C belongs to the editor (vim cancels with it), but the terminal sends it to this process
    # too, which must not stop and take the editor down with it. A Python handler, unlike SIG_IGN,
    # is the default again in the editor once it starts.
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        done = subprocess.run(command, check=False)
    except OSError as exc:
        raise click.ClickException(f"cannot start the editor {command[0]!r}: {exc.strerror or exc}") from None
    finally:
        signal.signal(signal.SIGINT, previous)
    sys.exit(done.returncode if done.returncode >= 0 else 128 - done.returncode)  # killed by N: 128 + N, as a shell


def editor_command() -> list[str]:
    """$VISUAL, then $EDITOR (either may carry arguments: `code -w`), else vi."""
    import shlex

    for name in ("VISUAL", "EDITOR"):
        setting = os.environ.get(name, "").strip()
        if setting:
            try:
                words = shlex.split(setting)
            except ValueError as exc:
                raise click.ClickException(f"${name} cannot be split into words: {exc}") from None
            if words:
                return words
    return [FALLBACK_EDITOR]


def with_file(editor: list[str], file: str, line: int | None) -> list[str]:
    """The editor's command line opening `file` at `line` (None: at its top)."""
    if not line:
        return [*editor, file]
    name = os.path.basename(editor[0]).removesuffix(".exe")
    if name in GOTO_FLAG:
        return [*editor, "-g", f"{file}:{line}"]
    if name in FILE_COLON_LINE:
        return [*editor, f"{file}:{line}"]
    return [*editor, f"+{line}", file]
