"""Domain errors. The CLI maps every subclass of NotesSearchError to a one-line message and exit 1."""

from __future__ import annotations


class NotesSearchError(Exception):
    """Base class for errors a user should see as one clear line."""


class ConfigError(NotesSearchError):
    """The config file is missing, malformed, or has an invalid key or value."""

    @classmethod
    def at(cls, file: str, key: str, problem: str) -> ConfigError:
        """`file: key.path: problem`, or `file: problem` for the file as a whole (no key)."""
        return cls(f"{file}: {key}: {problem}" if key else f"{file}: {problem}")


class BadPattern(NotesSearchError):
    """A pattern the user typed cannot be searched for (an invalid regex, an empty one): a usage
    error, exit 2 as grep and ripgrep give it, so a script tells it from "nothing matched" (1)."""


class StoreError(NotesSearchError):
    """The index database cannot be opened or is inconsistent."""


class ReindexNeeded(NotesSearchError):
    """The index was built with another embedding space or chunker than the config asks for."""


class EmbedderError(NotesSearchError):
    """The embedder answered, but wrongly (bad dimension, malformed reply, wrong count)."""


class EmbedderUnavailable(EmbedderError):
    """The embedder could not be reached (down, timed out, 5xx after retries)."""


class SourceError(NotesSearchError):
    """A source cannot be read (missing folder, unreachable remote, corrupt mirror)."""


class FileNotAtRevision(SourceError):
    """A git source holds no such file at the revision asked for (a reader may suggest another)."""


class PathOutsideSources(NotesSearchError):
    """A path argument points outside every configured source."""


class GlobError(NotesSearchError):
    """A path glob past the length or segment cap."""
