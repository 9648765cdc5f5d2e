"""CLI commands `show`, `grep` and `toc`, registered on the group by search.cli.

Module level imports only click: search.cli imports this module on every invocation, and the
libraries behind these commands (pygit2, subprocess plumbing) load only when one of them runs.
Nothing from search.cli is imported at module level either, so there is no import cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from indexer.errors import NotesSearchError
from search.terminal import echo, styled

if TYPE_CHECKING:
    from indexer.config import Config
    from indexer.store import Store
    from search.cli import App
    from search.grep import GrepHit, Unsearched
    from search.refs import Ref


def _store_if_any(app: App) -> Store | None:
    """Workspace files need no index; git files need it only for their indexed rev."""
    return app.open_store(readonly=True) if app.config.db.exists() else None



def _view(config: Config, store: Store | None, source_id: str, ref: Ref) -> dict[str, object]:
    """The JSON shape of `show`: one file, or the requested line range of it."""
    from indexer.config import GitSource
    from indexer.errors import SourceError
    from search.refs import confine, indexed_rev, read_text, text_lines

    text = read_text(config, store, source_id, ref.path)
    source = config.source(source_id)
    rel = confine(config, source_id, ref.path)
    lines = text_lines(text)
    start, end = 1, len(lines)
    if ref.line is not None:
        if ref.line > len(lines):
            raise SourceError(f"{source_id}:{rel} has {len(lines)} lines; line {ref.line} is past the end")
        start = ref.line
        end = len(lines) if ref.count is None else min(len(lines), ref.line + ref.count - 1)
        text = "\n".join(lines[start - 1 : end]) + "\n"
    return {
        "source": source_id,
        "path": rel,
        "rev": indexed_rev(store, source) if isinstance(source, GitSource) else None,
        "start_line": start,
        "end_line": end,
        "text": text,
    }


@click.command()
@click.argument("ref", metavar="REF")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: results, one entry per source that has the file.")
@click.pass_obj
def show(app: App, ref: str, as_json: bool) -> None:
    """Print a file or a line range: REF is [SOURCE:]PATH[:LINE[:COUNT]].

    A bare PATH is printed from every source that has it. Files of git sources come from the
    mirror at the indexed commit, the version search results point at.
    """
    from search.cli import emit_json
    from search.refs import missing_file, parse_ref, sources_having

    config = app.config
    parsed = parse_ref(ref, config.sources)
    store = _store_if_any(app)
    try:
        source_ids = [parsed.source_id] if parsed.source_id else sources_having(config, store, parsed.path)
        if not source_ids:
            raise missing_file(config, store, parsed.path)
        views = [_view(config, store, source_id, parsed) for source_id in source_ids]
    finally:
        if store is not None:
            store.close()
    if as_json:
        emit_json({"results": views})  # one shape, however many sources have the path
        return
    for i, view in enumerate(views):
        if len(views) > 1:
            if i:
                echo()
            echo(f"==> {view['source']}:{view['path']} <==")
        text = str(view["text"])  # its lines stay lines; a CR inside one cannot overwrite it
        echo(text, nl=not text.endswith("\n"), multiline=True)


GREP_WARNINGS = 5  # lines naming what was not searched; --json lists everything


def _warn_unsearched(unsearched: list[Unsearched]) -> None:
    for item in unsearched[:GREP_WARNINGS]:
        echo(f"warning: not searched: {item}", err=True)
    if len(unsearched) > GREP_WARNINGS:
        echo(f"warning: and {len(unsearched) - GREP_WARNINGS} more not searched (--json lists all)", err=True)


def _print_hit(hit: GrepHit) -> None:
    echo(styled(f"{hit.source}:{hit.path}:{hit.line}:", fg="magenta"), f" {hit.text}")


@click.command()
@click.argument("pattern")
@click.option("--source", "source_ids", multiple=True, metavar="ID", help="Only this source (repeatable).")
@click.option("--path", metavar="P", help="A file, or a folder searched recursively; SOURCE:P names one source.")
@click.option("-i", "--ignore-case", is_flag=True, help="Match regardless of case.")
@click.option("-F", "--fixed-strings", "fixed", is_flag=True, help="PATTERN is literal text, not a regex.")
@click.option("--max-count", default=200, show_default=True, type=click.IntRange(1, 100_000),
              help="Stop after this many matching lines in total.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: pattern, results, truncated, unsearched.")
@click.pass_obj
def grep(app: App, pattern: str, source_ids: tuple[str, ...], path: str | None, ignore_case: bool, fixed: bool,
         max_count: int, as_json: bool) -> None:
    """Exact or regex search of the live files, without the index.

    Same scope rules as the index. Git sources are searched at the indexed commit. A PATTERN
    starting with '-' goes after `--`: notes-search grep -- -x.

    What cannot be searched (a source, folder or file) is named in a warning on stderr (and
    in `unsearched` with --json); the rest is searched, exit 0. When nothing at all could be
    searched: one error line, exit 1.
    """
    from search.cli import emit_json
    from search.grep import grep as run_grep
    from search.refs import split_source

    config = app.config
    if path:
        prefix, path = split_source(path, config.sources)
        if prefix is not None:  # SOURCE:PATH names one source; with --source it must be among them
            if source_ids and prefix not in source_ids:
                raise NotesSearchError(f"--path {prefix}:{path} is in source {prefix!r}, which --source "
                                       f"{', '.join(source_ids)} leaves out")
            source_ids = (prefix,)
    store = _store_if_any(app)
    try:
        found = run_grep(config, store, pattern, source_ids=source_ids, path=path, ignore_case=ignore_case,
                         fixed=fixed, max_count=max_count + 1)
    finally:
        if store is not None:
            store.close()
    found.check_searched()
    truncated = len(found) > max_count
    hits = found[:max_count]
    if as_json:
        emit_json({"pattern": pattern, "results": [hit.to_json() for hit in hits], "truncated": truncated,
                   "unsearched": [item.to_json() for item in found.unsearched]})
    else:
        for hit in hits:
            _print_hit(hit)
        if not hits:
            echo("no matches" + (" in what could be searched" if found.unsearched else ""), err=True)
    _warn_unsearched(found.unsearched)
    if truncated:
        echo(f"notice: stopped after {max_count} matches (--max-count)", err=True)


@click.command()
@click.option("--source", "source_ids", multiple=True, metavar="ID", help="Only this source (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: results, one {source, file, text} per source.")
@click.pass_obj
def toc(app: App, source_ids: tuple[str, ...], as_json: bool) -> None:
    """Print the table of contents (folder, file, title, tags, headings) and refresh its file."""
    from indexer.toc import render_toc, toc_path, write_toc
    from search.cli import emit_json

    config = app.config
    selected = [config.source(source_id).id for source_id in source_ids] or list(config.sources)
    store = app.open_store(readonly=True)
    try:
        tocs = [(source_id, render_toc(source_id, store.file_rows(source_id))) for source_id in selected]
    finally:
        store.close()
    results = []
    for i, (source_id, text) in enumerate(tocs):
        path = toc_path(config, source_id)
        try:
            write_toc(path, text)
        except OSError as exc:
            echo(f"warning: cannot write {path}: {exc.strerror or exc}", err=True)
        if as_json:
            results.append({"source": source_id, "file": str(path), "text": text})
        else:
            echo(("\n" if i else "") + text, nl=False, multiline=True)
    if as_json:
        emit_json({"results": results})
