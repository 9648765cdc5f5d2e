"""The `notes-search` command: parses input, calls the service, formats output.

This module is imported by every invocation, so it holds only the group: each command lives in
its own module (LAZY_COMMANDS), imported when named, and the cron no-op `sync` pays for no
search engine, MCP server, router or hook installer.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from indexer.errors import BadPattern, NotesSearchError
from search.terminal import safe_errors

if TYPE_CHECKING:  # heavy imports (numpy, requests) load only when a command needs an embedder
    from indexer.config import EmbeddingConfig
    from indexer.embedders import Embedder

# Every command, as "module:attribute"; --help lists them sorted without importing one more than it must.
LAZY_COMMANDS = {
    "init": "search.cli.index:init",
    "sync": "search.cli.index:sync",
    "reindex": "search.cli.index:reindex",
    "status": "search.cli.index:status",
    "query": "search.cli.query:query",
    "show": "search.cli.files:show",
    "grep": "search.cli.files:grep",
    "toc": "search.cli.files:toc",
    "open": "search.cli.opening:open_command",
    "watch": "search.cli.watch:watch",
    "mcp": "search.cli.serve:mcp",
    "serve": "search.cli.daemon:serve",
    "collections": "search.cli.collections:collections_command",
    "route": "search.cli.collections:route_command",
    "hooks": "search.cli.hooks:hooks",
    "eval": "search.cli.evaluate:eval_command",
    "migrate": "search.cli.migrate:migrate",
    "config": "search.cli.setup:config_group",
    "source": "search.cli.setup:source_group",
}

# Commands that write the index: only these create the db's and the log's folders. The others
# read; when they fail (no index yet, a bad argument) they leave nothing behind.
WRITING_COMMANDS = frozenset({"sync", "reindex", "watch", "mcp", "serve", "hooks"})


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

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:  # parsing imports the named command's module: Ctrl-C can come here too
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            _interrupted()

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with safe_errors():  # outermost: every error line, however mapped below, is escaped
                return self._invoke(ctx)
        except KeyboardInterrupt:  # unwound: every `finally` and `with` on the way has run
            _interrupted()
        except BrokenPipeError:  # the reader went away (`| head`): before click's handler exits 1
            from search.interrupt import output_closed

            output_closed()

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BadPattern as exc:  # as grep's exit 2: not "nothing matched"
            raise _BadInput(str(exc)) from None
        except NotesSearchError as exc:
            raise click.ClickException(str(exc)) from None


class _BadInput(click.ClickException):
    """One `Error:` line, exit 2: input the command cannot use, told apart from exit 1's
    "nothing found" (click's UsageError would add the usage and a help hint)."""

    exit_code = 2


def _interrupted() -> NoReturn:
    from search.interrupt import interrupted  # only on Ctrl-C: every call pays for what it imports

    interrupted()


def make_embedder(config: EmbeddingConfig) -> Embedder:
    """The embedder of every command; looked up on this module at call time, so tests can
    replace it here."""
    from indexer.embedders import make_embedder as build

    return build(config)


def stderr_is_terminal() -> bool:
    """Progress and summaries only for a person at a terminal; cron and hooks get silence."""
    return sys.stderr.isatty()


@click.group(cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "-c",
    "config_path",
    metavar="PATH",
    help="Config file (default: $NOTES_SEARCH_CONFIG, ./notes-search.yaml, then ~/.config/notes-search/config.yaml).",
)
@click.version_option(package_name="notes-search")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """Hybrid (BM25 + vector) search over markdown notes in git repositories and folders."""
    from search.cli.context import CliContext

    ctx.obj = CliContext(config_path, writes=ctx.invoked_subcommand in WRITING_COMMANDS)


def main() -> None:
    try:
        cli(prog_name="notes-search")
    except KeyboardInterrupt:  # outside any command: before or after click runs one
        _interrupted()
