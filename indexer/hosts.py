"""Which host names mean "this machine": the one answer for the MCP guard and the embedders."""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    """True for `localhost` and any loopback address (127.0.0.0/8, ::1), brackets allowed.

    The MCP server binds without a token only here, and the HTTP embedders ignore proxy
    variables for such a host (a proxy cannot reach the caller's own loopback)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
