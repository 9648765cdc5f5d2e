"""`init`, `sync`, `reindex` and `status`: writing the index and saying what it holds."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from search.cli.context import CliContext, pass_context
from search.cli.formats import STATUS_FORMATS, chosen_format, emit, format_option, server_memory_line
from search.cli.options import source_option
from search.terminal import echo, echo_json

if TYPE_CHECKING:
    from indexer.freshness import GitLag, NotIndexed
    from indexer.progress_log import Progress
    from indexer.store import FileProblem
    from indexer.sync import SyncReport
    from search.service.status import StatusReport

MAX_SKIPS_SHOWN = 20  # per source; a folder of attachments must not flood the terminal
MAX_PROBLEMS_SHOWN = 10  # per source in `status`: the overview stays readable
REINDEX_LOCK_WAIT = 30.0  # seconds `reindex` waits for a running sync: a person is waiting


def _source_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refused here as the config would refuse it, rather than written into a file that every
    later command then rejects."""
    from indexer.config import BAD_NEW_SOURCE_ID, is_new_source_id

    if not is_new_source_id(value):
        raise click.BadParameter(BAD_NEW_SOURCE_ID)
    return value


@click.command()
@click.argument("notes_dir", default="notes", metavar="[DIR]")
@click.option(
    "--source-id", default="notes", show_default=True, callback=_source_id, help="Id of the workspace source."
)
@click.option(
    "--here",
    is_flag=True,
    help="Write ./notes-search.yaml with the index beside it (default: the user config, index in the data folder).",
)
@pass_context
def init(ctx: CliContext, notes_dir: str, source_id: str, here: bool) -> None:
    """Write a starter config that indexes DIR (default: ./notes) with the local embedder.

    By default the config goes to ~/.config/notes-search/config.yaml (found from any folder) and
    the index to ~/.local/share/notes-search/ (XDG_CONFIG_HOME / XDG_DATA_HOME honoured); --config,
    $NOTES_SEARCH_CONFIG or --here write that file instead, with the index beside it.
    """
    from indexer.config import STARTER_CONFIG, literal_path, parse_config
    from indexer.configpaths import DEFAULT_CONFIG_NAME, user_config_path, user_data_dir
    from indexer.errors import ConfigError

    named = ctx.location if ctx.config_option or os.environ.get("NOTES_SEARCH_CONFIG") else None
    if named is not None:
        target, root = named.path, None
    elif here:
        target, root = Path.cwd() / DEFAULT_CONFIG_NAME, None
    else:
        target, root = user_config_path(), user_data_dir()
    if target.exists():
        raise click.ClickException(f"{target} already exists; not overwriting it")
    notes_root = Path(notes_dir)
    if not notes_root.is_dir():
        given = click.get_current_context().get_parameter_source("notes_dir") != click.core.ParameterSource.DEFAULT
        if given:
            raise click.ClickException(f"{notes_dir}: not a folder")
        # "notes: not a folder" read as if the user had typed a wrong name
        raise click.ClickException(
            f"no folder {notes_dir!r} here (the default DIR): give your notes folder, `notes-search init DIR`"
        )
    try:  # relative to the config's root when inside it, so the pair can be moved together
        relative = notes_root.resolve().relative_to((root or target.parent).resolve())
    except ValueError:
        relative = notes_root.resolve()
    text = STARTER_CONFIG.format(
        root=json.dumps(literal_path(str(root))) if root is not None else ".",
        source_id=json.dumps(source_id),
        notes_root=json.dumps(literal_path(str(relative))),
    )
    try:  # a config every later command would reject (the index inside DIR) is never written
        parse_config(text, str(target), base=target.parent)
    except ConfigError as exc:
        hint = (
            ""
            if root is not None
            else "; write the config outside DIR, or run init without --here (index in the data folder)"
        )
        raise click.ClickException(f"{exc}{hint}") from None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "x", encoding="utf-8") as file:  # "x": never overwrite, even in a race
            file.write(text)
    except OSError as exc:
        raise click.ClickException(f"cannot write {target}: {exc.strerror or exc}") from None
    if root is None:
        echo(f"wrote {target}; next: notes-search -c {target} sync")
        return
    echo(f"wrote {target} (index in {root}); next: notes-search sync")
    shadow = Path.cwd() / DEFAULT_CONFIG_NAME
    if shadow.exists():
        echo(f"note: {shadow} is used instead while you are in this folder", err=True)


@click.command()
@source_option(help="Sync only this source (repeatable).")
@click.option("--full", is_flag=True, help="Re-read and re-chunk every file (vectors of unchanged text are kept).")
@click.option(
    "--retry-embedder",
    is_flag=True,
    help="Try the embedder now, even while a recent outage's back-off runs (--full does too).",
)
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the sync report as JSON.")
@pass_context
def sync(
    ctx: CliContext, source_ids: tuple[str, ...], full: bool, retry_embedder: bool, quiet: bool, as_json: bool
) -> None:
    """Bring the index up to date (the cron / hook job).

    Exits 0 at once when another sync holds the lock: silently under cron, with a notice on a
    terminal, or with --json an object that says `"locked": true`.
    """
    import search.cli as package  # looked up now: tests replace stderr_is_terminal there

    service = ctx.service()
    interactive = package.stderr_is_terminal() and not quiet and not as_json
    with _progress(interactive) as progress:
        outcome = service.sync(
            list(source_ids) or None,
            full=full,
            progress=progress,
            on_warning=None if quiet else _warn,
            retry_embedder=retry_embedder,
        )
    report = outcome.report
    if report.locked and not as_json:
        if interactive:  # someone who just committed a note must not believe it is indexed now
            from indexer.lock import running_sync

            pid = running_sync(ctx.service().config)
            holder = f" (pid {pid})" if pid else ""
            echo(f"another sync{holder} is running; what it has not read yet, the next sync indexes", err=True)
        return
    if as_json:
        echo_json(outcome.to_json())
        if report.locked:
            return
    elif interactive:
        _print_sync_summary(report)
    for failed in report.failed:
        # under cron, a source failing as it did last time was said then (and the log has it):
        # one mail when it breaks, not one a minute until it is mended
        if interactive or as_json or not failed.error_repeated:
            echo(f"error: {_naming(failed.source_id, failed.error or '')}", err=True)
    if not quiet and not as_json:
        _warn_problems(report)
    if report.embed_notice and not quiet and not as_json:
        echo(f"warning: {report.embed_notice}", err=True)
    if report.failed:
        sys.exit(1)


def _naming(source_id: str, error: str) -> str:
    """The error, after `source ID: ` unless it names the source itself (a git source's does)."""
    return error if error.startswith(f"git source {source_id!r}") else f"source {source_id}: {error}"


def _warn_problems(report: SyncReport) -> None:
    """Collection problems are said at every sync, cron's included, until the file is mended: a
    typo in `_meta.yaml` otherwise only renames a collection after its folder, which nobody
    notices. Front-matter problems are said when the note is indexed; `status` keeps them."""
    for s in report.sources:
        for meta_path, problem in s.collection_problems:
            echo(f"warning: {s.source_id}: {meta_path}: {problem}", err=True)
        for note_path, problem in s.front_matter_problems[:MAX_SKIPS_SHOWN]:
            echo(f"warning: {s.source_id}: {note_path}: front matter: {problem}", err=True)
        if len(s.front_matter_problems) > MAX_SKIPS_SHOWN:
            more = len(s.front_matter_problems) - MAX_SKIPS_SHOWN
            echo(
                f"warning: {s.source_id}: {more} more notes with front-matter problems (`status` lists them)", err=True
            )


def _warn(warning: str) -> None:
    echo(f"warning: {warning}", err=True)


@contextmanager
def _progress(interactive: bool) -> Iterator[Progress | None]:
    """Bars on stderr for a person at a terminal; None (nothing drawn) for cron, hooks, --quiet."""
    if not interactive:
        yield None
        return
    from search.cli.progress import StageProgress

    with StageProgress(sys.stderr) as progress:
        yield progress


def _print_sync_summary(report: SyncReport) -> None:
    if report.rebuilt:
        echo(report.rebuilt, err=True)
    if report.rechunked:
        echo(report.rechunked, err=True)
    for s in report.sources:
        if s.recloned:
            echo(f"{s.source_id}: the mirror was damaged ({s.recloned}) and was cloned again", err=True)
        for folder in s.unreadable:
            echo(f"{s.source_id}: cannot read {folder or '.'}/, its indexed files are kept", err=True)
        if s.error:
            continue
        if s.changed or s.skipped:
            echo(
                f"{s.source_id}: +{s.added} ~{s.updated} -{s.deleted}"
                + (f", {s.skipped} skipped" if s.skipped else ""),
                err=True,
            )
        else:
            echo(f"{s.source_id}: up to date", err=True)
    if report.embedded or report.pending:
        echo(f"embedded {report.embedded} chunks, {report.pending} pending ({report.seconds:.1f}s)", err=True)
    for line in report.coverage:
        echo(f"coverage: {line}", err=True)


@click.command()
@click.argument("path")
@click.option("--full", is_flag=True, help="Re-read and re-chunk even unchanged files.")
@click.option("--json", "as_json", is_flag=True)
@pass_context
def reindex(ctx: CliContext, path: str, full: bool, as_json: bool) -> None:
    """Re-index one file or folder now: [SOURCE:]PATH ('.' for every source whole), a source
    id or a collection."""
    import search.cli as package  # looked up now: tests replace stderr_is_terminal there
    from search.service.indexing import sync_report_json

    with _progress(package.stderr_is_terminal() and not as_json) as progress:
        outcome = ctx.service().reindex(path, full=full, lock_wait=REINDEX_LOCK_WAIT, progress=progress)
    if outcome.locked:
        raise click.ClickException(f"another sync held the lock for {REINDEX_LOCK_WAIT:g} s; try again")
    report = outcome.report
    if as_json:
        echo_json(sync_report_json(report))
    else:
        for s in report.sources:
            state = f"error: {s.error}" if s.error else f"+{s.added} ~{s.updated} -{s.deleted}"
            echo(f"{s.source_id}: {state}" + (f", {s.skipped} skipped" if s.skipped else ""))
            for skipped_path, reason in s.skips[:MAX_SKIPS_SHOWN]:
                echo(f"    skipped {skipped_path}: {reason}")
            if len(s.skips) > MAX_SKIPS_SHOWN:
                echo(f"    ... and {len(s.skips) - MAX_SKIPS_SHOWN} more skipped (the log lists them)")
        _warn_problems(report)
        if report.rechunked:
            echo(report.rechunked, err=True)
        if report.embed_notice:
            echo(f"warning: {report.embed_notice}", err=True)
    if report.failed:
        sys.exit(1)


@click.command()
@click.argument("path", required=False)
@click.option("--offline", is_flag=True, help="Do not ask git remotes for their head (no network).")
@click.option("--check", is_flag=True, help="Read the whole index for damage now (SQLite integrity_check).")
@click.option("--json", "as_json", is_flag=True)
@format_option(STATUS_FORMATS)
@pass_context
def status(
    ctx: CliContext, path: str | None, offline: bool, check: bool, as_json: bool, output_format: str | None
) -> None:
    """What is indexed, when, what is pending, and whether the index lags the disk or the remote.

    PATH (a source id, collection, folder or file) narrows the counts to it.
    """
    fmt = chosen_format(output_format, as_json)
    report = ctx.service(check_remote=not offline).status(path, check=check)
    if fmt != "text":
        emit("status", fmt, report.to_json())
        return
    _print_status(report)


def _print_status(report: StatusReport) -> None:
    from indexer.freshness import GitLag, LagUnknown, WorkspaceLag  # loaded by the status just read

    echo(f"index: {report.db}")
    if report.check is not None:
        echo(f"check: {report.check}")
    running = report.sync_running
    if running is not None:
        pid = f" (pid {running.pid})" if running.pid else ""
        echo(f"sync running{pid}: the counts below may change until it finishes")
    if report.unfinished_copy:
        from search.service.status import UNFINISHED_COPY_ADVICE  # status's module: not loaded by every sync

        echo(f"unfinished copy: a migrate into this index stopped before it was verified; {UNFINISHED_COPY_ADVICE}")
    if report.server_memory is not None:
        echo(server_memory_line(report.server_memory.to_json()))
    emb = report.embedding
    echo(f"embedding: {emb.provider} {emb.model} ({emb.dims} d)")
    if emb.reindex_needed:
        echo("reindex needed: " + "; ".join(emb.reindex_needed))
    if emb.outage is not None:
        echo(f"{emb.outage.describe()} (`notes-search sync --retry-embedder` tries now)")
    echo(f"languages: {_languages_line(report.languages)}")
    for s in report.sources:
        name = s.id + (f":{s.path}" if s.path else "")
        echo(
            f"{name:<20} {s.kind:<9} {s.counts.files:>6} files {s.counts.chunks:>7} chunks "
            # a sync that finds nothing to index writes nothing (the cron tick): the time is of
            # the last one that changed the index, not the last run
            f"{s.counts.pending:>6} pending  {f'last change {s.last_sync_at}' if s.last_sync_at else 'never synced'}"
        )
        echo(f"    languages: {_languages_line(s.languages)}")
        lag = s.lag
        if s.kind == "git":
            _print_heads(s.indexed_rev, lag if isinstance(lag, GitLag) else None)
        if s.incomplete and not report.unfinished_copy:
            what = "still running" if running is not None else "did not finish"
            echo(f"    incomplete: the first sync {what}; files are missing until `notes-search sync` completes")
        if isinstance(lag, WorkspaceLag) and lag.unreadable:
            echo(f"    cannot read: {', '.join(lag.unreadable)} (indexed copies kept until readable)")
        _print_front_matter_problems(s.front_matter_problems)
        _print_not_indexed(s.not_indexed)
        if lag.lags:
            echo("    lags: the index is behind; run `notes-search sync`")
        if s.error:
            echo(f"    error: {s.error}")
        elif isinstance(lag, LagUnknown) and lag.error:
            echo(f"    cannot check: {lag.error}")


def _print_heads(indexed_rev: str | None, lag: GitLag | None) -> None:
    """The indexed rev beside the head it is held against (None: the heads could not be told)."""
    remote = lag.remote_head if lag else None
    head = (remote or (lag.mirror_head if lag else None) or "?")[:12]
    echo(f"    indexed rev {(indexed_rev or 'none')[:12]}, {'remote' if remote else 'mirror'} head {head}")
    if lag and lag.remote_error:
        echo(f"    remote: {lag.remote_error}")
    if lag and lag.mirror_damaged:
        echo(f"    mirror damaged ({lag.mirror_damaged}): `notes-search sync` clones it again")


def _print_front_matter_problems(problems: Sequence[FileProblem]) -> None:
    """Until the notes are mended: their tags and dates were read line by line, maybe not all."""
    for problem in problems[:MAX_PROBLEMS_SHOWN]:
        echo(f"    front matter: {problem.path}: {problem.problem}")
    if len(problems) > MAX_PROBLEMS_SHOWN:
        echo(f"    front matter: {len(problems) - MAX_PROBLEMS_SHOWN} more notes (`status --json` lists them all)")


def _print_not_indexed(left_out: NotIndexed) -> None:
    """A note that is never found: here is why (the sync said it once, into a log nobody reads)."""
    if not left_out.count:
        return
    named = ", ".join(f"{path} ({reason})" for path, reason in left_out.files[:MAX_PROBLEMS_SHOWN])
    more = left_out.count - min(len(left_out.files), MAX_PROBLEMS_SHOWN)
    echo(f"    not indexed: {named}" + (f" and {more} more" if more else ""))


def _languages_line(languages: dict[str, int]) -> str:
    """Chunks per language, e.g. "en 120, cs 40, unknown 3"."""
    return ", ".join(f"{language} {count}" for language, count in languages.items()) or "no chunks"
