"""A long sync nobody watches tells its progress in the log: done/total, rate and time left,
every interval of a stage (a fake clock here; the real interval is seconds)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from indexer import progress_log
from indexer.progress_log import ProgressLog
from indexer.sync import SyncReport


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_interval_with_rate_and_time_left(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    logger = logging.getLogger("notes_search.test_progress")
    progress = ProgressLog(logger, interval=10.0, clock=clock)
    with caplog.at_level(logging.INFO, logger=logger.name):
        progress("embed", 0, 600)  # the stage starts
        for second in range(1, 31):  # two chunks a second for 30 s
            clock.now += 1
            progress("embed", 2 * second, 600)
        clock.now += 5
        progress("embed", 70, 600)  # within the interval: nothing
        clock.now += 5
        progress("scan", 1, 0)  # a new stage starts its own clock
        clock.now += 12
        progress("scan", 250, 0)
    assert [record.getMessage() for record in caplog.records] == [
        "embed: 20/600 (3%), 2.00/s, about 4 min 50 s left",
        "embed: 40/600 (6%), 2.00/s, about 4 min 40 s left",
        "embed: 60/600 (10%), 2.00/s, about 4 min 30 s left",
        "scan: 250 so far, 20.8/s",
    ]


def test_a_stalled_stage_says_the_time_left_is_unknown(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    logger = logging.getLogger("notes_search.test_progress")
    progress = ProgressLog(logger, interval=10.0, clock=clock)
    with caplog.at_level(logging.INFO, logger=logger.name):
        progress("embed", 0, 5000)
        clock.now += 7200
        progress("embed", 0, 5000)
        clock.now += 3600
        progress("embed", 100, 5000)
    assert [record.getMessage() for record in caplog.records] == [
        "embed: 0/5000 (0%), 0.00/s, time left unknown",
        "embed: 100/5000 (2%), 0.01/s, about 147 h 0 min left",
    ]


def test_a_sync_without_a_terminal_logs_its_progress(
    do_sync: Callable[..., SyncReport], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress_log, "LOG_INTERVAL_S", 0.0)  # every step, instead of every 10 s
    with caplog.at_level(logging.INFO, logger="notes_search.sync"):
        report = do_sync()
    assert report.embedded > 0
    lines = [
        r.getMessage() for r in caplog.records if r.name == "notes_search.sync" and r.getMessage().startswith("embed: ")
    ]
    assert lines, [r.getMessage() for r in caplog.records]
    assert lines[-1].startswith(f"embed: {report.embedded}/{report.embedded} (100%)")


def test_a_short_sync_logs_no_progress(do_sync: Callable[..., SyncReport], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="notes_search.sync"):
        do_sync()
    assert not [r for r in caplog.records if r.getMessage().startswith(("embed: ", "scan: "))]
