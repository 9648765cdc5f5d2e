"""The `notes-search` command: parses input, calls the library, formats output. No SQL here."""

from __future__ import annotations

import importlib
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from typing import TYPE_CHECKING

from indexer.config import STARTER_CONFIG, Config, EmbeddingConfig, find_config, load_config, selection_warnings
from indexer.errors import ConfigError, NotesSearchError, PathOutsideSources
from indexer.store import SearchScope, Store
from search.engine import MODES, SearchResponse, search
from search.terminal import Safe, SafeLogFormatter, echo, echo_json, safe_errors, styled

if TYPE_CHECKING:  # heavy imports (numpy, requests, pygit2, markdown-it) load only when a command needs them
    from indexer.embedders import Embedder
    from indexer.sync import SyncReport
    from search.service import NotesService

log = logging.getLogger("notes_search")


# Commands defined in their own modules, imported only when named (or listed by --help): the
# cron no-op `sync` should not pay for loading the MCP server, the router or the hook installer.
LAZY_COMMANDS = {
    "show": "search.cli.files:show",
    "grep": "search.cli.files:grep",
    "toc": "search.cli.files:toc",
    "watch": "search.watch_cmd:watch",
    "mcp": "search.mcp_server:mcp_command",
    "collections": "search.cli.collections:collections_command",
    "route": "search.cli.collections:route_command",
    "hooks": "hooks.install:hooks",
    "eval": "search.cli.evaluate:eval_command",
}


class CliGroup(click.Group):
    """Loads LAZY_COMMANDS on demand; maps domain errors to one-line `Error: ...` messages with
    exit code 1."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            module_name, attr = LAZY_COMMANDS[cmd_name].split(":")
            command = getattr(importlib.import_module(module_name), attr)
            if command.name != cmd_name:
                raise RuntimeError(f"LAZY_COMMANDS[{cmd_name!r}] names the command {command.name!r}")
            self.add_command(command)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        with safe_errors():  # outermost: every error line, however mapped below, is escaped
            return self._invoke(ctx)

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except NotesSearchError as exc:
            raise click.ClickException(str(exc)) from None


def make_embedder(config: EmbeddingConfig) -> Embedder:
    from indexer.embedders import make_embedder as build

    return build(config)


# Commands that write the index: only these create the db's and the log's folders. The others
# read; when they fail (no index yet, a bad argument) they leave nothing behind.
WRITING_COMMANDS = frozenset({"sync", "reindex", "watch", "mcp", "hooks"})


@dataclass
class App:
    config_option: str | None
    writes: bool = True
    _config: Config | None = None
    _service: NotesService | None = None

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(find_config(self.config_option))
            setup_logging(self._config, create=self.writes)
        return self._config

    def service(self, *, check_remote: bool = False) -> NotesService:
        """The process's one service; its embedder is built by `make_embedder` as looked up at
        call time (tests replace it on this module)."""
        if self._service is None:
            from search.service import NotesService

            package = sys.modules[__name__]
            self._service = NotesService(self.config, lambda cfg: package.make_embedder(cfg),
                                         check_remote=check_remote)
        return self._service

    def embedder(self) -> Embedder:
        """One embedder per process, created on first use (the local model loads lazily)."""
        return self.service().embedder()

    def open_store(self, readonly: bool = False) -> Store:
        return Store.open(self.config.db, readonly=readonly)


def setup_logging(config: Config, create: bool = True) -> None:
    """Log to the config's log file; nothing goes to the terminal from here (cron stays silent).
    Without `create` (a read-only command) the log is used only if its folder exists and the
    file can be opened: reading the index must not need, or make, a writable log."""
    root = logging.getLogger("notes_search")
    if any(getattr(h, "notes_search_file", None) == str(config.log) for h in root.handlers):
        return
    for handler in list(root.handlers):
        if getattr(handler, "notes_search_file", None):
            root.removeHandler(handler)
            handler.close()
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        # without a log file, records go nowhere: Python's last-resort handler would print them
        # on stderr, where the command already says what matters in its own words
        root.addHandler(logging.NullHandler())
    if not create and not config.log.parent.is_dir():
        return
    try:
        if create:
            config.log.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(config.log, encoding="utf-8")
    except OSError as exc:
        if not create:
            return
        raise ConfigError(f"cannot write log file {config.log} (`log:` in the config): {exc.strerror or exc}") from None
    handler.notes_search_file = str(config.log)  # type: ignore[attr-defined]
    # one record per line, whatever a file name holds: people `tail -f` this file
    handler.setFormatter(SafeLogFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def emit_json(data: object) -> None:
    echo_json(data)


@click.group(cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config", "-c", "config_path", metavar="PATH",
    help="Config file (default: $NOTES_SEARCH_CONFIG, then ./notes-search.yaml).",
)
@click.version_option(package_name="notes-search")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """Hybrid (BM25 + vector) search over markdown notes in git repositories and folders."""
    ctx.obj = App(config_path, writes=ctx.invoked_subcommand in WRITING_COMMANDS)


pass_app = click.make_pass_decorator(App)


# ---- init ----------------------------------------------------------------------------------


@cli.command()
@click.argument("notes_dir", default="notes", metavar="[DIR]")
@click.option("--source-id", default="notes", show_default=True, help="Id of the workspace source.")
@pass_app
def init(app: App, notes_dir: str, source_id: str) -> None:
    """Write a starter config that indexes DIR with the local embedder."""
    target = find_config(app.config_option)
    if target.exists():
        raise click.ClickException(f"{target} already exists; not overwriting it")
    notes_root = Path(notes_dir)
    if not notes_root.is_dir():
        raise click.ClickException(f"{notes_dir}: not a folder")
    try:
        relative = notes_root.resolve().relative_to(target.resolve().parent)
    except ValueError:
        relative = notes_root.resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "x", encoding="utf-8") as file:  # "x": never overwrite, even in a race
            file.write(STARTER_CONFIG.format(source_id=source_id, notes_root=json.dumps(str(relative))))
    except OSError as exc:
        raise click.ClickException(f"cannot write {target}: {exc.strerror or exc}") from None
    echo(f"wrote {target}; next: notes-search -c {target} sync")


# ---- sync ----------------------------------------------------------------------------------


@cli.command()
@click.option("--source", "source_ids", multiple=True, metavar="ID", help="Sync only this source (repeatable).")
@click.option("--full", is_flag=True, help="Re-read and re-chunk every file (vectors of unchanged text are kept).")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the sync report as JSON.")
@pass_app
def sync(app: App, source_ids: tuple[str, ...], full: bool, quiet: bool, as_json: bool) -> None:
    """Bring the index up to date (the cron / hook job).

    Exits 0 at once when another sync holds the lock: silently, or with --json an object
    that says `"locked": true`.
    """
    from indexer.sync import run_sync

    config = app.config
    for warning in selection_warnings(config):
        log.warning("%s", warning)
        if not quiet:
            echo(f"warning: {warning}", err=True)
    interactive = stderr_is_terminal() and not quiet and not as_json
    progress, finish = _progress_printer() if interactive else (None, lambda: None)
    try:
        report = run_sync(config, source_ids=list(source_ids) or None, full=full,
                          embedder_factory=app.embedder, progress=progress)
    finally:
        finish()
    if report.locked and not as_json:
        return
    if as_json:
        emit_json(_sync_json(report))
        if report.locked:
            return
    elif interactive:
        _print_sync_summary(report)
    for failed in report.failed:
        echo(f"error: source {failed.source_id}: {failed.error}", err=True)
    if report.embed_notice and not quiet and not as_json:
        echo(f"warning: {report.embed_notice}", err=True)
    if report.failed:
        sys.exit(1)


def stderr_is_terminal() -> bool:
    """Progress and summaries only for a person at a terminal; cron and hooks get silence."""
    return sys.stderr.isatty()


def _progress_printer() -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """A one-line progress display on stderr; only used when stderr is a terminal."""
    state = {"shown": False}

    def show(stage: str, done: int, total: int) -> None:
        if stage == "files" and done % 50:
            return
        text = f"{stage}: {done}/{total}" if total else f"{stage}: {done}"
        echo(Safe("\r"), f"{text:<40}", nl=False, err=True)
        state["shown"] = True

    def finish() -> None:
        if state["shown"]:
            echo(Safe("\r" + " " * 40 + "\r"), nl=False, err=True)

    return show, finish


def _sync_json(report: SyncReport) -> dict[str, object]:
    """`locked`: another sync held the lock, so nothing was done (every count is zero)."""
    return {
        "locked": report.locked,
        "changed": report.changed,
        "seconds": report.seconds,
        "embedded": report.embedded,
        "pending": report.pending,
        "embed_notice": report.embed_notice,
        "rebuilt": report.rebuilt,
        "coverage": report.coverage,
        "sources": [
            {"id": s.source_id, "kind": s.kind, "added": s.added, "updated": s.updated, "deleted": s.deleted,
             "touched": s.touched, "skipped": s.skipped, "rev": s.rev, "error": s.error,
             "unreadable": [f"{folder}/" if folder else "./" for folder in s.unreadable], "recloned": s.recloned,
             "skips": [{"path": path, "reason": reason} for path, reason in s.skips]}
            for s in report.sources
        ],
    }


def _print_sync_summary(report: SyncReport) -> None:
    if report.rebuilt:
        echo(report.rebuilt, err=True)
    for s in report.sources:
        if s.recloned:
            echo(f"{s.source_id}: the mirror was damaged ({s.recloned}) and was cloned again", err=True)
        for folder in s.unreadable:
            echo(f"{s.source_id}: cannot read {folder or '.'}/, its indexed files are kept", err=True)
        if s.error:
            continue
        if s.changed or s.skipped:
            echo(f"{s.source_id}: +{s.added} ~{s.updated} -{s.deleted}" + (f", {s.skipped} skipped" if s.skipped else ""), err=True)
        else:
            echo(f"{s.source_id}: up to date", err=True)
    if report.embedded or report.pending:
        echo(f"embedded {report.embedded} chunks, {report.pending} pending ({report.seconds:.1f}s)", err=True)
    for line in report.coverage:
        echo(f"coverage: {line}", err=True)


# ---- query ---------------------------------------------------------------------------------


def scope_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--path", "path", metavar="P", help="A file, or a folder searched recursively.")(func)
    func = click.option("--collection", metavar="C", help="Only this collection (folder with _meta.yaml).")(func)
    func = click.option("--source", "source_ids", multiple=True, metavar="ID", help="Only this source (repeatable).")(func)
    return func


def make_scope(config: Config, source_ids: tuple[str, ...], collection: str | None, path: str | None) -> SearchScope:
    """--source / --collection / --path as one scope. A `SOURCE:` prefix on the path narrows
    to that source (it must be among --source when both are given); the path is normalised and
    confined like every other path argument."""
    from indexer.collections import nfc
    from search.refs import confine_in, split_source

    for source_id in source_ids:
        config.source(source_id)
    if path is None:
        return SearchScope(source_ids=tuple(source_ids), collection=collection)
    prefix, rest = split_source(path, config.sources)
    if prefix is not None:
        if source_ids and prefix not in source_ids:
            raise NotesSearchError(f"--path {path!r} is in source {prefix!r}, which --source "
                                   f"{', '.join(source_ids)} leaves out")
        source_ids = (prefix,)
    try:
        rel = confine_in(config, source_ids or tuple(config.sources), rest)
    except PathOutsideSources as exc:
        raise PathOutsideSources(f"--path: {exc}") from None
    return SearchScope(source_ids=tuple(source_ids), collection=collection, path=nfc(rel) or None)


def check_scope_exists(config: Config, store: Store, scope: SearchScope) -> None:
    """A --path or --collection that names nothing is a mistake to report, not an empty answer."""
    from search.refs import has_path

    if scope.collection is not None:
        from search.route import load_entries

        if scope.collection not in {e.name for e in load_entries(store)}:
            raise NotesSearchError(f"--collection {scope.collection!r}: no such collection "
                                   "(`notes-search collections` lists them)")
    if scope.path:
        sources = scope.source_ids or tuple(config.sources)
        if not any(has_path(config, store, source_id, scope.path) for source_id in sources):
            raise NotesSearchError(f"--path {scope.path!r}: no such file or folder in "
                                   f"{', '.join(sources)} (on disk or in the index)")


@cli.command()
@click.argument("text")
@click.option("-k", "k", default=8, show_default=True, type=click.IntRange(1, 1000), help="Number of results.")
@click.option("--mode", type=click.Choice(MODES), default="hybrid", show_default=True)
@scope_options
@click.option("--explain", is_flag=True, help="Show each hit's BM25 rank, vector rank and fused score.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (SPEC §10).")
@pass_app
def query(app: App, text: str, k: int, mode: str, source_ids: tuple[str, ...], collection: str | None,
          path: str | None, explain: bool, as_json: bool) -> None:
    """Search the index."""
    config = app.config
    scope = make_scope(config, source_ids, collection, path)
    store = app.open_store(readonly=True)
    try:
        check_scope_exists(config, store, scope)
        lag = None
        if scope.path or scope.source_ids or path is not None:  # `--path .` scopes every source whole
            from indexer.sync import catch_up

            lag = catch_up(config, scope.source_ids, scope.path, None if mode == "lex" else app.embedder)
        response = search(store, config, text, k=k, mode=mode, scope=scope, embedder_factory=app.embedder)
    finally:
        store.close()
    if lag:
        response.notice = f"{response.notice}; {lag}" if response.notice else lag
    if as_json:
        emit_json(response.to_json(explain=explain))
        if response.notice and response.degraded:
            echo(f"notice: {response.notice}", err=True)
        return
    _print_hits(response, explain)


def _print_hits(response: SearchResponse, explain: bool) -> None:
    if response.notice:
        echo(f"notice: {response.notice}", err=True)
    if explain and response.query_language is not None:
        echo(
            f"query language {response.query_language}; vectors {response.vector_space}; "
            f"{response.keyword_blind} candidates in other languages scored without keywords; "
            f"keyword weight {response.keyword_weight:g}"
        )
    if not response.results:
        echo("no results", err=True)
        return
    for hit in response.results:
        where = f"{hit.source}:{hit.path}:{hit.line}"
        echo(styled(where, fg="magenta"), "  ", styled(hit.breadcrumb, bold=True), f"  {hit.score:.4f}")
        if explain:
            e = hit.explain
            blind = "  (no keyword match possible)" if e.get("keyword_blind") else ""
            echo(
                f"    bm25 rank {e['bm25_rank'] or '-'}  vec rank {e['vec_rank'] or '-'}  rrf {e['rrf']}"
                f"  language {e.get('language') or '-'}{blind}"
            )
        lines = [ln for ln in hit.text.splitlines() if ln.strip()][:4]
        for line in lines:
            echo("    " + (line if len(line) <= 160 else line[:157] + "..."))
        echo()


# ---- reindex -------------------------------------------------------------------------------

MAX_SKIPS_SHOWN = 20  # per source; a folder of attachments must not flood the terminal


@cli.command()
@click.argument("path")
@click.option("--full", is_flag=True, help="Re-read and re-chunk even unchanged files.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def reindex(app: App, path: str, full: bool, as_json: bool) -> None:
    """Re-index one file or folder now: [SOURCE:]PATH ('.' for a whole source)."""
    from indexer.sync import run_sync
    from search.refs import confine_in, excluded_file, has_path, split_source

    config = app.config
    source_id, rest = split_source(path, config.sources)
    source_ids = [source_id] if source_id else list(config.sources)
    rel = confine_in(config, source_ids, rest)  # '.' and '' mean the whole source
    if rel:
        store = app.open_store(readonly=True) if config.db.exists() else None
        try:
            source_ids = [sid for sid in source_ids if has_path(config, store, sid, rel)]
        finally:
            if store is not None:
                store.close()
        if not source_ids:
            raise NotesSearchError(f"{path!r}: no such file or folder in any source (on disk or in the index)")
    report = run_sync(config, source_ids=source_ids, path=rel or None, full=full,
                      embedder_factory=app.embedder, lock_timeout=30.0)
    if report.locked:
        raise click.ClickException("another sync held the lock for 30 s; try again")
    for s in report.sources:  # the walk never sees an excluded file: say why nothing happened
        if rel and not s.error and excluded_file(config, s.source_id, rel):
            s.skipped += 1
            s.skips.append((rel, "excluded by the config (paths/include/exclude)"))
    if as_json:
        emit_json(_sync_json(report))
    else:
        for s in report.sources:
            state = f"error: {s.error}" if s.error else f"+{s.added} ~{s.updated} -{s.deleted}"
            echo(f"{s.source_id}: {state}" + (f", {s.skipped} skipped" if s.skipped else ""))
            for skipped_path, reason in s.skips[:MAX_SKIPS_SHOWN]:
                echo(f"    skipped {skipped_path}: {reason}")
            if len(s.skips) > MAX_SKIPS_SHOWN:
                echo(f"    ... and {len(s.skips) - MAX_SKIPS_SHOWN} more skipped (the log lists them)")
        if report.embed_notice:
            echo(f"warning: {report.embed_notice}", err=True)
    if report.failed:
        sys.exit(1)


# ---- status --------------------------------------------------------------------------------


@cli.command()
@click.argument("path", required=False)
@click.option("--offline", is_flag=True, help="Do not ask git remotes for their head (no network).")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def status(app: App, path: str | None, offline: bool, as_json: bool) -> None:
    """What is indexed, when, what is pending, and whether the index lags the disk or the remote.

    PATH (a source id, collection, folder or file) narrows the counts to it.
    """
    data = app.service(check_remote=not offline).status(path).to_json()
    if as_json:
        emit_json(data)
        return
    echo(f"index: {data['db']}")
    running = data.get("sync_running")
    if running is not None:
        pid = f" (pid {running['pid']})" if running.get("pid") else ""
        echo(f"sync running{pid}: the counts below may change until it finishes")
    emb = data["embedding"]
    echo(f"embedding: {emb['provider']} {emb['model']} ({emb['dims']} d)")
    if emb["reindex_needed"]:
        echo("reindex needed: " + "; ".join(emb["reindex_needed"]))
    echo(f"languages: {_languages_line(data['languages'])}")
    for s in data["sources"]:
        name = s["id"] + (f":{s['path']}" if s.get("path") else "")
        echo(
            f"{name:<20} {s['kind']:<9} {s['files']:>6} files {s['chunks']:>7} chunks "
            f"{s['pending']:>6} pending  last sync {s['last_sync_at'] or 'never'}"
        )
        echo(f"    languages: {_languages_line(s['languages'])}")
        lag = s.get("lag") or {}
        if s["kind"] == "git":
            rev = (s["indexed_rev"] or "none")[:12]
            remote = (lag.get("remote_head") or lag.get("mirror_head") or "?")[:12]
            echo(f"    indexed rev {rev}, {'remote' if lag.get('remote_head') else 'mirror'} head {remote}")
            if lag.get("remote_error"):
                echo(f"    remote: {lag['remote_error']}")
            if lag.get("mirror_damaged"):
                echo(f"    mirror damaged ({lag['mirror_damaged']}): `notes-search sync` clones it again")
        if s.get("incomplete"):
            what = "still running" if running is not None else "did not finish"
            echo(f"    incomplete: the first sync {what}; files are missing until `notes-search sync` completes")
        if lag.get("unreadable"):
            echo(f"    cannot read: {', '.join(lag['unreadable'])} (indexed copies kept until readable)")
        if lag.get("lags"):
            echo("    lags: the index is behind; run `notes-search sync`")
        if s.get("error"):
            echo(f"    error: {s['error']}")
        elif lag.get("error"):
            echo(f"    cannot check: {lag['error']}")


def _languages_line(languages: dict[str, int]) -> str:
    """Chunks per language, e.g. "en 120, cs 40, unknown 3"."""
    return ", ".join(f"{language} {count}" for language, count in languages.items()) or "no chunks"


def main() -> None:
    cli(prog_name="notes-search")
