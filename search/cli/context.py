"""What every command gets from the group: the config option, and the service built from it.

Reading the config has no side effects; `service()` is where a command starts work, so that is
where the log file is configured (created only by the commands that write the index)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from indexer.config import Config, EmbeddingConfig, load_located_config
from indexer.configpaths import ConfigLocation, locate_config

if TYPE_CHECKING:
    from indexer.embedders import Embedder
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
        """The config, loaded once (a broken one fails here, with its one-line error). No side
        effects: `service()` is where a command starts work."""
        if self._config is None:
            self._config = load_located_config(self.location)
        return self._config

    @property
    def location(self) -> ConfigLocation:
        """Which config file this invocation uses, and why."""
        return locate_config(self.config_option)

    def service(self, *, check_remote: bool = False) -> NotesService:
        """The invocation's one service (the first call decides `check_remote`), after the log
        file is configured: every command that reads or writes the index calls this first."""
        if self._service is None:
            from search.logfile import configure_log_file
            from search.service import NotesService
            from search.terminal import echo

            configure_log_file(self.config, create=self.writes, warn=lambda line: echo(line, err=True))
            self._service = NotesService(self.config, _make_embedder, check_remote=check_remote)
        return self._service


def _make_embedder(config: EmbeddingConfig) -> Embedder:
    """`search.cli.make_embedder` as it is when called: tests replace it on the package."""
    import search.cli as package

    return package.make_embedder(config)


pass_context = click.make_pass_decorator(CliContext)
