"""What every command gets from the group: the config option, and the service built from it.

Reading the config has no side effects; `service()` is where a command starts work, so that is
where the log file is configured (created only by the commands that write the index)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from indexer.config import Config, EmbeddingConfig, find_config, load_config

if TYPE_CHECKING:
    from indexer.embedders import Embedder
    from indexer.store import Store
    from search.service import NotesService


class CliContext:
    """The click context object (`ctx.obj`) of one invocation."""

    def __init__(self, config_option: str | None, *, writes: bool = True) -> None:
        self.config_option = config_option
        self.writes = writes  # only commands that write the index create the db's and the log's folders
        self._config: Config | None = None
        self._service: NotesService | None = None

    @property
    def config(self) -> Config:
        """The config, loaded once (a broken one fails here, with its one-line error).

        TRANSITIONAL: also configures the log file, as `App.config` did, for the commands that
        read `ctx.config` without calling `service()` yet (show/grep/toc, collections/route,
        eval, hooks); once they call `service()` first, this becomes a plain load."""
        if self._config is None:
            self._config = load_config(find_config(self.config_option))
            from search.logfile import configure_log_file

            configure_log_file(self._config, create=self.writes)
        return self._config

    def service(self, *, check_remote: bool = False) -> NotesService:
        """The invocation's one service (the first call decides `check_remote`), after the log
        file is configured."""
        if self._service is None:
            from search.logfile import configure_log_file
            from search.service import NotesService

            configure_log_file(self.config, create=self.writes)  # explicit: the command starts work here
            self._service = NotesService(self.config, _make_embedder, check_remote=check_remote)
        return self._service

    def embedder(self) -> Embedder:
        """The service's embedder (for commands that hand a factory to the indexer)."""
        return self.service().embedder()

    def open_store(self, readonly: bool = False) -> Store:
        """A connection of the service's index (for commands not yet served by a method)."""
        from indexer.store import Store

        return Store.open(self.service().config.db, readonly=readonly)


def _make_embedder(config: EmbeddingConfig) -> Embedder:
    """`search.cli.make_embedder` as it is when called: tests replace it on the package."""
    import search.cli as package

    return package.make_embedder(config)


pass_context = click.make_pass_decorator(CliContext)
