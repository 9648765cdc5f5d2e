"""`show`, `grep` and `toc`: the notes' files themselves, read live (show, grep) or listed from
the index (toc). The service does the work; these commands parse and print."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from search.cli.context import CliContext, pass_context
from search.cli.formats import HIT_FORMATS, NOTHING_FOUND, chosen_format, emit, format_option
from search.cli.options import TakesText, completes, source_option, text_option
from search.refs import Ref
from search.service import GREP_MAX_HITS
from search.service.reading import MANY_MAX_BYTES, MANY_MAX_LINES
from search.terminal import echo, echo_json, hyperlink, styled

if TYPE_CHECKING:
    from search.grep import GrepHit, Unsearched
    from search.service.reading import FileView


@click.command()
@click.argument("refs", metavar="REF...", nargs=-1, required=True, shell_complete=completes("ref"))
@click.option("--json", "as_json", is_flag=True, help="One JSON object: results (one entry per file), omitted, errors.")
@format_option()
@click.option(
    "--max-lines",
    type=click.IntRange(1),
    default=MANY_MAX_LINES,
    show_default=True,
    help="Several files: at most this many lines in all.",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(1),
    default=MANY_MAX_BYTES,
    show_default=True,
    help="Several files: at most this many bytes in all.",
)
@pass_context
def show(
    context: CliContext,
    refs: tuple[str, ...],
    as_json: bool,
    output_format: str | None,
    max_lines: int,
    max_bytes: int,
) -> None:
    """Print files or line ranges: each REF is [SOURCE:]PATH[:LINE[:COUNT]] or a glob
    (`notes:devops/*.md`, `**` spans folders).

    A bare PATH is printed from every source that has it. Files of git sources come from the
    mirror at the indexed commit, the version search results point at. Several REFs (or a
    glob) are read up to --max-lines/--max-bytes in all: the files after the cap are named on
    stderr, not printed. A REF that cannot be read is an error line; the others are printed,
    exit 1.
    """
    from search.service.reading import ManyViews, asks_for_several

    fmt = chosen_format(output_format, as_json)
    service = context.service()
    several = asks_for_several(refs)
    if several:
        many = service.read_many(refs, max_lines=max_lines, max_bytes=max_bytes)
    else:  # one plain ref: the whole file, whatever its size; its error is the command's
        many = ManyViews(service.show(refs[0]), [], [], max_lines, max_bytes)
    if fmt == "text":
        _print_views(many.views, headers=several or len(many.views) > 1)
    elif fmt == "files":  # names only: what the cap left out is listed as well
        emit("show", fmt, {"results": [view.to_json() for view in many.views]})
        for name in many.omitted:
            echo(name)
    else:
        emit("show", fmt, many.to_json())
    for cut in many.cut_short:
        echo(
            f"notice: {cut.ref} cut at line {cut.end} of {cut.total} "
            f"(--max-lines {max_lines}, --max-bytes {max_bytes}); the rest: show {cut.rest}",
            err=True,
        )
    if many.omitted and fmt != "files":
        shown = ", ".join(many.omitted[:OMITTED_SHOWN])
        more = f" and {len(many.omitted) - OMITTED_SHOWN} more" if len(many.omitted) > OMITTED_SHOWN else ""
        echo(
            f"notice: left out {len(many.omitted)} files past --max-lines {max_lines} / --max-bytes {max_bytes}: "
            f"{shown}{more}",
            err=True,
        )
    for item in many.failed:
        echo(f"error: {item.error}", err=True)
    if many.failed:
        sys.exit(1)


OMITTED_SHOWN = 10  # names of left-out files on the notice line; --json lists every one


def _print_views(views: list[FileView], *, headers: bool) -> None:
    """Each file under a `==> source:path <==` line (as `tail` and `head` print several)."""
    for i, view in enumerate(views):
        if headers:
            if i:
                echo()
            echo(f"==> {Ref(view.source_id, view.path)} <==")
        # its lines stay lines; a CR inside one cannot overwrite it
        echo(view.text, nl=not view.text.endswith("\n"), multiline=True)


GREP_WARNINGS = 5  # lines naming what was not searched; --json lists everything


def _warn_unsearched(unsearched: list[Unsearched]) -> None:
    for item in unsearched[:GREP_WARNINGS]:
        echo(f"warning: not searched: {item}", err=True)
    if len(unsearched) > GREP_WARNINGS:
        echo(f"warning: and {len(unsearched) - GREP_WARNINGS} more not searched (--json lists all)", err=True)


def _print_hit(hit: GrepHit) -> None:
    """`source:path:line: text`, the ref a link to the file on a terminal."""
    echo(hyperlink(styled(f"{Ref(hit.source, hit.path, hit.line)}:", fg="magenta"), hit.file), f" {hit.text}")


@click.command(cls=TakesText, text_param="pattern", several=True)
@click.argument("pattern", required=False)
@text_option(
    "--regexp", help="A pattern, as an option: repeatable (a line matching any is printed); for one beginning with '-'."
)
@source_option()
@click.option("--path", metavar="P", help="A file, or a folder searched recursively; SOURCE:P names one source.")
@click.option("-i", "--ignore-case", is_flag=True, help="Match regardless of case.")
@click.option("-F", "--fixed-strings", "fixed", is_flag=True, help="PATTERN is literal text, not a regex.")
@click.option(
    "--max-count",
    default=GREP_MAX_HITS,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Stop after this many matching lines in total.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object: pattern, results, truncated, unsearched.")
@format_option(HIT_FORMATS)
@pass_context
def grep(
    context: CliContext,
    pattern: tuple[str, ...],
    source_ids: tuple[str, ...],
    path: str | None,
    ignore_case: bool,
    fixed: bool,
    max_count: int,
    as_json: bool,
    output_format: str | None,
) -> None:
    """Exact or regex search of the live files, without the index.

    Same scope rules as the index. Git sources are searched at the indexed commit. A PATTERN
    starting with '-' goes after `--` or `-e`: notes-search grep -e -x. Several `-e PATTERN`
    (as ripgrep takes them) print the lines that match any of them.

    What cannot be searched (a source, folder or file) is named in a warning on stderr (and
    in `unsearched` with --json); the rest is searched. Exit 0 with matches, 1 without (as
    grep: --json still prints its object), 2 on a usage error; when nothing at all could be
    searched: one error line, exit 1.
    """
    from search.service.lookup import grep_target

    fmt = chosen_format(output_format, as_json)
    service = context.service()
    found = service.grep(
        pattern,
        target=grep_target(service.config, source_ids, path),
        ignore_case=ignore_case,
        fixed=fixed,
        max_count=max_count,
    )
    if fmt != "text":
        data = {
            "pattern": pattern[0],
            "patterns": list(pattern),
            "results": [hit.to_json() for hit in found.hits],
            "truncated": found.truncated,
            "unsearched": [item.to_json() for item in found.unsearched],
        }
        emit("grep", fmt, data)
    else:
        for hit in found.hits:
            _print_hit(hit)
        if not found.hits:
            echo("no matches" + (" in what could be searched" if found.unsearched else ""), err=True)
    _warn_unsearched(found.unsearched)
    if found.truncated:
        echo(f"notice: stopped after {max_count} matches (--max-count)", err=True)
    if not found.hits:
        sys.exit(NOTHING_FOUND)


@click.command()
@source_option()
@click.option("--json", "as_json", is_flag=True, help="One JSON object: results, one {source, file, text} per source.")
@pass_context
def toc(context: CliContext, source_ids: tuple[str, ...], as_json: bool) -> None:
    """Print the table of contents (folder, file, title, tags, headings) and refresh its file."""
    tocs = context.service().toc(source_ids)
    for i, toc_file in enumerate(tocs):
        if toc_file.write_error is not None:
            echo(f"warning: cannot write {toc_file.file}: {toc_file.write_error}", err=True)
        if not as_json:
            echo(("\n" if i else "") + toc_file.text, nl=False, multiline=True)
    if as_json:
        echo_json({"results": [{"source": t.source_id, "file": str(t.file), "text": t.text} for t in tocs]})
