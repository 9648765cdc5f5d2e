"""Progress of a long sync in the log, for the runs nobody watches (cron, hooks, the MCP server,
`sync --quiet`): a person at a terminal sees bars instead (search/cli/progress.py).

A first sync of a few hundred notes with the local model takes minutes; without these lines its
log says nothing between the start and the end."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

Progress = Callable[[str, int, int], None]  # (stage, done, total): what a sync reports as it goes

# Seconds between two lines of one stage: often enough to see it move, rare enough to read.
LOG_INTERVAL_S = 10.0


class ProgressLog:
    """A sync `progress` callback `(stage, done, total)` that logs, every `interval` seconds of
    a stage, how far it is (done/total), its rate since the stage began and, with a total, the
    time left at that rate. A stage shorter than `interval` logs nothing."""

    def __init__(
        self, logger: logging.Logger, interval: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.logger = logger
        self.interval = LOG_INTERVAL_S if interval is None else interval
        self.clock = clock
        self.stage = ""
        self.started = 0.0
        self.first_done = 0
        self.logged = 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = self.clock()
        if stage != self.stage:
            self.stage, self.started, self.first_done, self.logged = stage, now, done, now
            return
        if now - self.logged < self.interval:
            return
        self.logged = now
        elapsed = now - self.started
        rate = (done - self.first_done) / elapsed if elapsed > 0 else 0.0
        if total <= 0:  # a count with no end known (files read so far)
            self.logger.info("%s: %d so far, %.1f/s", stage, done, rate)
            return
        left = f"about {_duration((total - done) / rate)} left" if rate > 0 else "time left unknown"
        self.logger.info("%s: %d/%d (%d%%), %.2f/s, %s", stage, done, total, 100 * done // total, rate, left)


def _duration(seconds: float) -> str:
    """`42 s`, `7 min 5 s`, `2 h 13 min`."""
    whole = int(seconds + 0.5)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
