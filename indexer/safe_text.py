"""Text from notes and file names made harmless for a terminal, in one place.

Notes in a shared repository are written by other people, so their text, headings and file
names are hostile input once they reach a terminal: ESC starts CSI/OSC sequences that clear the
screen or retitle the window, CR and backspace overwrite what was printed, bidi overrides make
text read differently from what it is. Human output therefore shows every such character as a
visible escape instead of sending it:

* escaped: C0 controls except TAB (so NUL, BEL, BS, VT, FF, CR, ESC ...), DEL, the C1 range
  U+0080-U+009F (8-bit CSI/OSC), the line and paragraph separators U+2028/U+2029, the bidi marks,
  embeddings, overrides and isolates (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069),
  and lone surrogates (undecodable file names; they cannot be written to a UTF-8 stream);
* kept: TAB (it only moves right), zero-width joiners (emoji and Indic/Persian text need
  them), soft hyphens, BOMs and other format characters that cannot move the cursor or
  reorder text;
* LF is escaped too unless the caller prints several lines on purpose (`multiline`, e.g. a
  file for `show`): a name or heading must never start a new line that looks like output.
  In multi-line text a CR that ends a line (CRLF) is kept; any other CR is escaped.

The escape is Python's spelling (`\\n`, `\\r`, `\\x1b`, `\\u202e`). A backslash itself is not
escaped, so a note holding the four characters `\\x1b` looks like one holding ESC: ambiguous to
the eye, harmless to the terminal, and note text with backslashes (paths, regexes) stays as
written. JSON gets the same characters as `\\uXXXX` escapes, which decode to the exact text.
"""

from __future__ import annotations

import re

_C0 = "\x00-\x08\x0b\x0c\x0e-\x1f"  # without TAB, LF and CR, which depend on the layout
_OTHER = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_ONE_LINE = re.compile(f"[{_C0}\n\r{_OTHER}]")
_MULTI_LINE = re.compile(f"\r(?!\n)|[{_C0}{_OTHER}]")
_IN_JSON = re.compile(f"[{_OTHER}]")  # json.dumps already escapes C0 inside strings; LF is its layout
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def safe_for_terminal(text: str, *, multiline: bool = False) -> str:
    """`text` with every character that could drive a terminal shown as a visible escape."""
    return (_MULTI_LINE if multiline else _ONE_LINE).sub(_escape, text)


def safe_json(dumped: str) -> str:
    """JSON text (from `json.dumps(..., ensure_ascii=False)`) with the characters json leaves raw
    (DEL, C1, bidi controls, separators, lone surrogates) as `\\uXXXX`: the same data, decoded."""
    return _IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)
