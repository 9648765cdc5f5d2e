"""The log file of a config: configured by each front end when it starts work, never by a
library import or a config read (a test or another program that uses the service keeps its own
logging). Free of any front end: a front end hands in how it warns a person on stderr."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
from collections.abc import Callable
from typing import Any

from indexer.config import Config
from indexer.errors import ConfigError
from indexer.safe_text import safe_for_terminal

ROOT_LOGGER = "notes_search"


def configure_log_file(
    config: Config, *, create: bool, also_stderr: bool = False, warn: Callable[[str], None] | None = None
) -> logging.Handler | None:
    """Log to the config's log file; nothing goes to the terminal from here (cron stays silent).
    Without `create` (a read-only command) the log is used only if its folder exists and the
    file can be opened: reading the index must not need, or make, a writable log.

    `also_stderr` (a foreground service such as `watch`: journald reads its stderr) adds a
    stderr handler too and returns it, for the caller to remove when it stops. `warn` is how
    the front end tells a person, once, that the file cannot be written (None: not told)."""
    root = logging.getLogger(ROOT_LOGGER)
    if not any(getattr(h, "notes_search_file", None) == str(config.log) for h in root.handlers):
        _attach_file(root, config, create, warn)
    if not also_stderr:
        return None
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(SafeLogFormatter("%(levelname)s %(name)s: %(message)s", config.db_url))
    root.addHandler(stderr)
    return stderr


class QuietFileHandler(logging.FileHandler):
    """A log file that, when it cannot be written (a full disk, say), says so in one line on
    stderr and then drops records: the command goes on, and cron mails no tracebacks."""

    broken = False
    warn: Callable[[str], None] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if self.broken:
            return
        self.broken = True
        problem = sys.exc_info()[1]
        reason = (problem.strerror if isinstance(problem, OSError) else None) or problem
        if self.warn is None:
            return
        with contextlib.suppress(OSError, ValueError):  # no stderr either: nothing left to tell
            self.warn(
                f"warning: cannot write log file {self.baseFilename}: {reason}; log records are dropped from now on"
            )


def _attach_file(root: logging.Logger, config: Config, create: bool, warn: Callable[[str], None] | None) -> None:
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
        mode = os.stat(config.log).st_mode if os.path.exists(config.log) else stat.S_IFREG
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
            # opening a FIFO waits for ever for a reader; a device such as /dev/null is a way to keep no log
            if not create:
                return
            raise ConfigError(f"cannot write log file {config.log} (`log:` in the config): not a regular file")
        handler = QuietFileHandler(config.log, encoding="utf-8")
    except OSError as exc:
        if not create:
            return
        raise ConfigError(f"cannot write log file {config.log} (`log:` in the config): {exc.strerror or exc}") from None
    handler.warn = warn
    handler.notes_search_file = str(config.log)  # type: ignore[attr-defined]
    # one record per line, whatever a file name holds: people `tail -f` this file
    handler.setFormatter(SafeLogFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", config.db_url))
    root.addHandler(handler)
    root.setLevel(logging.INFO)


class SafeLogFormatter(logging.Formatter):
    """Log lines for a terminal (watch) and the log file (read with `tail -f`): a record stays
    one line whatever the file names hold, so a name cannot forge a record; a traceback keeps
    its lines. Passwords are masked (the index URL's `secret_url` in any form, and any URL's)."""

    def __init__(self, fmt: str, secret_url: str | None = None) -> None:
        super().__init__(fmt)
        self.secret_url = secret_url

    def formatMessage(self, record: logging.LogRecord) -> str:
        from indexer.redaction import redact  # when a record is written, not at every start

        return safe_for_terminal(redact(super().formatMessage(record), self.secret_url))

    def formatException(self, ei: Any) -> str:
        from indexer.redaction import redact

        return safe_for_terminal(redact(super().formatException(ei), self.secret_url), multiline=True)

    def formatStack(self, stack_info: str) -> str:
        return safe_for_terminal(super().formatStack(stack_info), multiline=True)
