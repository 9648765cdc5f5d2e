"""Where the config file is found, and the per-user folders: for every command, and for the
warm path's client (search.warm), which decides which server to ask before anything heavy is
imported; so this module imports only the standard library's lightest parts."""

from __future__ import annotations

import os
from pathlib import Path

TYPE_CHECKING = False  # typing itself costs the warm path's client milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

DEFAULT_CONFIG_NAME = "notes-search.yaml"
APP_DIR = "notes-search"
USER_CONFIG_NAME = "config.yaml"


def _xdg_dir(environ: Mapping[str, str], variable: str, default: str) -> Path:
    """An XDG base folder: the variable when it holds an absolute path (the spec says to ignore a
    relative one), else the default below the home folder."""
    value = environ.get(variable, "")
    if value and os.path.isabs(value):
        return Path(value)
    home = environ.get("HOME") or os.path.expanduser("~")
    return Path(home) / default


def user_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """`${XDG_CONFIG_HOME:-~/.config}/notes-search/config.yaml`: the config found from anywhere."""
    return (
        _xdg_dir(os.environ if environ is None else environ, "XDG_CONFIG_HOME", ".config") / APP_DIR / USER_CONFIG_NAME
    )


def user_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`${XDG_DATA_HOME:-~/.local/share}/notes-search`: where `init` puts the index, log and mirrors."""
    return _xdg_dir(os.environ if environ is None else environ, "XDG_DATA_HOME", ".local/share") / APP_DIR


class ConfigLocation:
    """Which config file a command uses and why (`notes-search config path`). `found` is False
    when no candidate exists: `path` is then where the error points. (A plain class: dataclasses
    and typing cost the warm path's client, which only needs the path, about 10 ms.)"""

    __slots__ = ("found", "looked_at", "path", "reason")

    def __init__(self, path: Path, reason: str, found: bool, looked_at: tuple[Path, ...] = ()) -> None:
        self.path = path
        self.reason = reason
        self.found = found
        self.looked_at = looked_at

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigLocation) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"ConfigLocation(path={self.path!r}, reason={self.reason!r}, found={self.found!r}, looked_at={self.looked_at!r})"

    def _fields(self) -> tuple[Path, str, bool, tuple[Path, ...]]:
        return self.path, self.reason, self.found, self.looked_at

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "reason": self.reason,
            "exists": self.found,
            "looked_at": [str(p) for p in self.looked_at],
        }


def locate_config(
    explicit: str | None, *, cwd: Path | None = None, environ: Mapping[str, str] | None = None
) -> ConfigLocation:
    """--config, then $NOTES_SEARCH_CONFIG, then ./notes-search.yaml, then the user config.

    Pure apart from reading the environment and asking whether two files exist, so any process
    (the CLI, the MCP server, a daemon looking for "the server for this config") decides alike.
    A file named explicitly is used whether or not it exists (its absence is the error)."""
    environ = os.environ if environ is None else environ
    if explicit:
        path = Path(explicit)
        return ConfigLocation(path, "given with --config", path.is_file())
    env = environ.get("NOTES_SEARCH_CONFIG")
    if env:
        path = Path(env)
        return ConfigLocation(path, "from $NOTES_SEARCH_CONFIG", path.is_file())
    here = (cwd if cwd is not None else Path.cwd()) / DEFAULT_CONFIG_NAME
    user = user_config_path(environ)
    looked_at = (here, user)
    if here.exists():
        return ConfigLocation(here, f"./{DEFAULT_CONFIG_NAME} in the current folder", True, looked_at)
    if user.exists():
        return ConfigLocation(
            user, f"the user config (no --config, $NOTES_SEARCH_CONFIG or ./{DEFAULT_CONFIG_NAME})", True, looked_at
        )
    return ConfigLocation(here, "no config found", False, looked_at)


def find_config(explicit: str | None) -> Path:
    """The path `locate_config` chooses."""
    return locate_config(explicit).path
