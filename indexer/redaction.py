"""Passwords out of every message: the one place that knows how a connection string carries one.

A PostgreSQL URL holds a password in its user part (`postgresql://me:pw@host/db`) or as a
`password=` parameter, percent-encoded or not; libpq and the server quote it back in their
errors raw (`invalid percent-encoded token: "s3cret%PW"`), decoded, or cut into pieces where a
character it parses (`@`, `/`) was not encoded (`failed to resolve host 'ss@db.lan'`). `redact`
removes all of these; `describe_url` is the URL as messages and `status` show it (user, host
and database kept). Standard library only: it runs on error paths of commands that import
little.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote, urlsplit

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
MASK = "***"
PERCENT_ENCODED = "percent-encoded (% @ / ? # and spaces as %25 %40 %2F %3F %23 %20)"
# pieces of a password shorter than this are left alone: masking every "a" in a message would
# hide the message, and one or two characters give nothing away
MIN_PIECE = 2
# characters a password may hold unencoded in a URL's user part (RFC 3986 userinfo)
_USERINFO_SAFE = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|%[0-9A-Fa-f]{2})*")
# any other URL's password in the text: scheme://user:password@. A match starts where a run of
# scheme characters starts and lies inside one word (`_WORD`): tried from every letter of a long
# word, each attempt scanned the rest of it, and an error quoting a 100,000-character argument
# took 17 s to mask (in the MCP server, on the thread that serves every client)
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z0-9+.-]+://[^\s:/@'\"]*):[^\s'\"]*@")
_WORD = re.compile(r"[^\s'\"]+")
# key=value connection strings and URL parameters: password=... (quoted or not)
_PARAMS_START = re.compile(r"\?[A-Za-z_]+=")
_PASSWORD_PARAM = re.compile(r"(?i)\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\"]+)")


def is_postgres_url(location: object) -> bool:
    """Whether an index location is a PostgreSQL URL (anything else is a SQLite file path)."""
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def _userinfo_end(rest: str) -> int:
    """Where the user part of `rest` (the URL after `scheme://`) ends: its last `@` before the
    parameters (`?name=`), or -1. An unencoded `@`, `/` or `?` in a password stays inside it."""
    params = _PARAMS_START.search(rest)
    return rest.rfind("@", 0, params.start() if params else len(rest))


def _userinfo_password(url: str) -> str | None:
    """The password as written between `scheme://user:` and the user part's end (a parser that
    stops at an unencoded `/` or the first `@` sees less of it)."""
    _, sep, rest = url.partition("://")
    end = _userinfo_end(rest)
    if not sep or end < 0:
        return None
    user, colon, password = rest[:end].partition(":")
    return password if colon and "/" not in user else None


def _param_passwords(url: str) -> list[str]:
    query = url.partition("?")[2]
    raw = [item.partition("=")[2] for item in query.split("&") if item.partition("=")[0].lower() == "password"]
    decoded = [value for key, value in parse_qsl(query, keep_blank_values=True) if key.lower() == "password"]
    return raw + decoded


def secrets_of(url: str) -> list[str]:
    """Every form the URL's password can take in a message, longest first."""
    written = [p for p in (_userinfo_password(url), urlsplit(url).password if "://" in url else None) if p]
    written += [p for p in _param_passwords(url) if p]
    forms: set[str] = set()
    for password in written:
        for form in (password, unquote(password), quote(unquote(password), safe="")):
            forms.add(form)
            # pieces a parser may cut an unencoded password into
            forms.update(piece for piece in re.split(r"[@/?#:\s]", form) if len(piece) >= MIN_PIECE)
    return sorted((f for f in forms if f), key=len, reverse=True)


def describe_url(url: str) -> str:
    """The URL without its password (for messages and `status`): libpq takes one in the user
    part and as a `password=` parameter alike. Everything else stays as written."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    if _userinfo_password(url) is not None:
        end = _userinfo_end(rest)
        user = rest[:end].partition(":")[0]
        rest = (f"{user}@" if user else "") + rest[end + 1 :]
    base, question, query = rest.partition("?")
    if question:
        query, hash_sign, fragment = query.partition("#")
        params = [item for item in query.split("&") if item.partition("=")[0].lower() != "password"]
        rest = base + (f"?{'&'.join(params)}" if params else "") + hash_sign + fragment
    return f"{scheme}://{rest}"


def redact(text: str, url: str | None = None) -> str:
    """`text` fit to show or log: `url` as `describe_url` shows it, its password in any form
    masked, and any other URL's or `password=` parameter's password masked too."""
    if url:
        text = text.replace(url, describe_url(url))
        for secret in secrets_of(url):
            text = text.replace(secret, MASK)
    text = _WORD.sub(_mask_url_password, text)
    return _PASSWORD_PARAM.sub(rf"\g<1>{MASK}", text)


def _mask_url_password(word: re.Match[str]) -> str:
    """A word with `scheme://user:password@` in it, masked. Every match ends at the word's last
    `@` (the password part is greedy), so only the text up to it is matched: an attempt then
    never scans on past it, and the time stays linear in the word."""
    text = word.group()
    end = text.rfind("@") + 1
    if not end or "://" not in text[:end]:
        return text
    return _URL_PASSWORD.sub(rf"\1:{MASK}@", text[:end]) + text[end:]


def password_needs_encoding(url: str) -> bool:
    """Whether the URL's password holds characters a URL parser reads as structure (`@`, `/`,
    spaces, a `%` that starts no escape): libpq then parses something else than was meant."""
    password = _userinfo_password(url)
    if password is not None and not _USERINFO_SAFE.fullmatch(password):
        return True
    return any(re.search(r"%(?![0-9A-Fa-f]{2})|\s", p) for p in _param_passwords(url)[:1])
