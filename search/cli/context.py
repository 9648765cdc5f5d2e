"""What every command gets from the group: the config option, and the service built from it.

Reading the config has no side effects; `service()` is where a command starts work, so that is
where the log file is configured (created only by the commands that write the index)."""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from indexer.config import Config, EmbeddingConfig, load_located_config, parse_config, read_user_file
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
            kept = _kept_services
            self._config = kept.config(self.location) if kept else load_located_config(self.location)
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
            kept = _kept_services
            if kept is not None:
                self._service = kept.service(self.config, check_remote)
            else:
                self._service = NotesService(self.config, _make_embedder, check_remote=check_remote)
        return self._service


def _make_embedder(config: EmbeddingConfig) -> Embedder:
    """`search.cli.make_embedder` as it is when called: tests replace it on the package."""
    import search.cli as package

    return package.make_embedder(config)


pass_context = click.make_pass_decorator(CliContext)


# ---- a long-lived process's services ----------------------------------------------------------

log = logging.getLogger("notes_search.serve")
_NAME = re.compile(r"[A-Za-z_]\w*")


class KeptServices:
    """A long-lived process's (the warm server's) config and services, reused by every call
    while the config file reads the same: a call then skips reading YAML, validating and
    building the service, and finds the embedder, the router and the vectors in memory that
    the calls before it loaded. An edited config is read anew at the next call and its
    services built again; each call still opens its own read connection, which is how it
    sees an index that a sync changed or replaced."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[str, str, str, tuple[tuple[str, str], ...]] | None = None
        self._config: Config | None = None
        self._services: dict[bool, NotesService] = {}
        self.reads = 0  # how often a config was read and parsed: once per edit, not per call

    def config(self, location: ConfigLocation) -> Config:
        """The config at `location`, parsed again only when its text, or an environment variable
        it could name (a `$NAME` in a path, `api_key_env`), differs from the last call's."""
        if not location.found and location.looked_at:
            return load_located_config(location)  # the one-line "no config found" error
        path = Path(location.path)
        text = read_user_file(path, "config")
        # the path as given (the config carries it) and resolved (a relative one means the caller's folder)
        key = (str(path), str(path.resolve()), text, _environment_named_in(text))
        with self._lock:
            if key == self._key and self._config is not None:
                return self._config
            config = parse_config(text, file=str(path), base=path.resolve().parent)
            self._key, self._config, self._services = key, config, {}
            self.reads += 1
            return config

    def service(self, config: Config, check_remote: bool) -> NotesService:
        """The service of `config` (the one `config()` returned last), built once."""
        from search.service import NotesService

        with self._lock:
            if config is not self._config:  # not this cache's (a caller that parsed its own)
                return NotesService(config, _make_embedder, check_remote=check_remote)
            service = self._services.get(check_remote)
            if service is None:
                if not self._services:  # said here, where the log file is set up
                    log.info("read the config %s (%d times by this process)", config.path, self.reads)
                service = NotesService(config, _make_embedder, check_remote=check_remote)
                self._services[check_remote] = service
            return service


_kept_services: KeptServices | None = None


def keep_services() -> KeptServices:
    """From now on every invocation of this process reuses the config and services of the one
    before it, while the config reads the same (for the warm server only: a one-shot command
    has no second invocation)."""
    global _kept_services
    if _kept_services is None:
        _kept_services = KeptServices()
    return _kept_services


def _environment_named_in(text: str) -> tuple[tuple[str, str], ...]:
    """The environment variables a config's text could depend on: every word of it that names
    one (a `$NAME` in a path, the variable `api_key_env` names), and HOME for `~`."""
    names = set(_NAME.findall(text)) | {"HOME"}
    return tuple(sorted((name, os.environ[name]) for name in names if name in os.environ))
