"""Paths named by configuration values (urls that point at this machine)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit


def local_repository_path(url: str) -> Path | None:
    """The folder a local git url (a path or file://) names; None for a network url.

    scp-style `host:path` counts as network: git reads a ':' before the first '/' that way."""
    if url.startswith("file://"):
        return Path(unquote(urlsplit(url).path))
    if "://" in url or ":" in url.split("/", 1)[0]:
        return None
    return Path(url)
