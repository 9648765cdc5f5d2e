"""The moments `--since` and `--until` name, as Unix seconds: pure functions of the text and of
"now", so the CLI, the MCP tool and the tests read a value the same way.

A filter keeps the files with `since <= updated_at < until`. What a value may be:
- a relative span back from now: `36h`, `7d`, `2w`, `3m` (calendar months), `1y` (also written
  `7 days`, `2weeks`, `1 year`...). It names one moment (now minus the span) for both flags.
- `today`, `yesterday`: since = the day's start; until = its end (the whole day included).
- an ISO date `2026-11-24` or month `2026-11`: since = its start; until = its end, so
  `--until 2026-11-24` includes all of that day.
- an ISO datetime `2026-11-24T09:30` (or with a space, seconds, fraction, `Z` or `+01:00`):
  since = that moment; until includes it to the precision written (`09:30` keeps 09:30:59).
Dates and datetimes without an offset are local time (the machine's time zone, as file times
are shown everywhere else).
"""

from __future__ import annotations

import calendar
import re
from datetime import date, datetime, timedelta

_RELATIVE = re.compile(
    r"(?P<count>\d{1,6})\s*(?P<unit>h|hours?|d|days?|w|weeks?|m|mo|months?|y|years?)(?:\s+ago)?", re.IGNORECASE
)
_DAY = re.compile(r"(?P<year>\d{4})-(?P<month>\d{2})(?:-(?P<day>\d{2}))?")
# the time of an ISO datetime, whose written precision decides how much an `until` includes
_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ](?P<hour>\d{2})(?::?(?P<minute>\d{2})(?::?(?P<second>\d{2})(?P<fraction>[.,]\d+)?)?)?"
)
HINT = "use a date (2026-11-24), a datetime (2026-11-24T09:30) or a span back from now (7d, 2w, 3m, 1y)"


class BadMoment(ValueError):
    """The text is no moment this module reads; the message says why, without the text."""


def parse_moment(text: str, *, until: bool, now: float) -> float:
    """The moment `text` names, in Unix seconds: a `since` bound (`until=False`, inclusive) or
    an `until` bound (exclusive: the first moment no longer included). Raises BadMoment."""
    try:
        return _moment(text, until, now)
    except BadMoment:
        raise
    except (ValueError, OverflowError) as exc:  # the calendar's edges: year 1, year 9999
        raise BadMoment(f"out of the calendar's range ({exc})") from None


def _moment(text: str, until: bool, now: float) -> float:
    value = " ".join(text.split()).lower()
    if not value:
        raise BadMoment(f"empty; {HINT}")
    if value in ("today", "yesterday"):
        day = datetime.fromtimestamp(now).date() - timedelta(days=value == "yesterday")
        return _day_start(day + timedelta(days=1) if until else day)
    if (relative := _RELATIVE.fullmatch(value)) is not None:
        return _back_from(now, int(relative["count"]), relative["unit"])
    if (day_match := _DAY.fullmatch(value)) is not None:
        return _calendar_bound(day_match, until)
    try:
        moment = datetime.fromisoformat(value.upper())
    except ValueError:
        raise BadMoment(f"not a date, datetime or span; {HINT}") from None
    start = moment.timestamp()  # a naive datetime is local time
    if not until:
        return start
    written = _TIME.match(value.upper())
    if written is None or written["fraction"]:
        return start + 1e-6
    step = 1 if written["second"] else 60 if written["minute"] else 3600
    return start + step


def _day_start(day: date) -> float:
    """Local midnight starting `day` (local wall time: a day is 23 or 25 hours across DST)."""
    return datetime(day.year, day.month, day.day).timestamp()


def _calendar_bound(found: re.Match[str], until: bool) -> float:
    year, month = int(found["year"]), int(found["month"])
    try:
        if found["day"] is None:
            date(year, month, 1)  # checks the month
            if not until:
                return _day_start(date(year, month, 1))
            return _day_start(date(year + month // 12, month % 12 + 1, 1))
        day = date(year, month, int(found["day"]))
    except ValueError as exc:
        raise BadMoment(f"not a calendar date ({exc})") from None
    return _day_start(day + timedelta(days=1) if until else day)


def _back_from(now: float, count: int, unit: str) -> float:
    """`now` minus a span: hours, days and weeks as durations; months and years on the
    calendar (the same day of the month, or its last day when that month is shorter)."""
    try:
        if unit[0] in "hdw":
            hours = count * {"h": 1, "d": 24, "w": 24 * 7}[unit[0]]
            return now - hours * 3600.0
        months = count * (12 if unit[0] == "y" else 1)
        local = datetime.fromtimestamp(now)  # naive local wall time: DST is applied for the result
        index = local.year * 12 + local.month - 1 - months
        year, month = divmod(index, 12)
        day = min(local.day, calendar.monthrange(year, month + 1)[1])
        return local.replace(year=year, month=month + 1, day=day).timestamp()
    except (ValueError, OverflowError):
        raise BadMoment("reaches back before year 1") from None


def describe(text: str, moment: float) -> str:
    """How a filter reads back in a scope label: the value as given, and for a relative one
    also the moment it named (local time, to the minute)."""
    value = " ".join(text.split())
    if _RELATIVE.fullmatch(value.lower()) is None:
        return value
    return f"{value} ({datetime.fromtimestamp(moment):%Y-%m-%d %H:%M})"
