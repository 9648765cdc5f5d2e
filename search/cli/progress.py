"""What a person at a terminal sees while `sync` or `reindex` works: one click progress bar per
stage, with done/total, rate and ETA (a count and rate where the total is not known)."""

from __future__ import annotations

import itertools
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

import click

from indexer.safe_text import safe_for_terminal

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

# what each stage counts, for its rate ("12.5 chunks/s"); an unlisted stage counts "items"
UNITS = {"files": "files", "embed": "chunks"}
REDRAW_SECONDS = 1.0  # a slow model spends seconds on one batch: the clock and ETA still move
MIN_DRAW_SECONDS = 0.1  # a scan reports every file: drawing each would cost more than the scan


class StageProgress:
    """A sync `progress` callback `(stage, done, total)` drawing on a terminal.

    A new stage (or a stage whose count starts again, as each source's scan does) closes the
    previous bar, which stays on screen with its final figures. The rate is the stage's mean so
    far; the ETA counts down between updates, so a long model batch does not freeze it. Use it
    as a context manager: leaving stops the redraw thread and closes the last bar.
    """

    def __init__(self, file: TextIO) -> None:
        self._file = file
        self._lock = threading.Lock()
        self._bar: ProgressBar[int] | None = None
        self._stage = ""
        self._started = 0.0  # when the stage was first reported, with `_first` done by then
        self._first = 0
        self._done = 0
        self._changed = 0.0  # when `_done` last moved
        self._drawn = 0.0
        self._closing = False
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)

    def __enter__(self) -> StageProgress:
        self._ticker.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._ticker.join()
        with self._lock:
            self._close()

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        with self._lock:
            if self._bar is None or stage != self._stage or done < self._done:
                self._close()
                self._open(stage, done, total, now)
            if done != self._done:
                self._done, self._changed = done, now
            bar = self._bar
            assert bar is not None
            if bar.length is not None and bar.length != total and total:
                bar.length = total
            if total or now - self._drawn >= MIN_DRAW_SECONDS:  # a counted stage steps per model batch
                self._draw(now)

    # ---- drawing (callers hold the lock) --------------------------------------------------------

    def _open(self, stage: str, done: int, total: int, now: float) -> None:
        self._stage, self._started, self._first, self._done, self._changed = stage, now, done, done, now
        self._bar = click.progressbar(
            length=total or None,
            iterable=None if total else itertools.count(),  # endless: click shows a count, no bar end
            label=safe_for_terminal(stage),
            bar_template="%(label)s  [%(bar)s]  %(info)s" if total else "%(label)s  %(info)s",
            file=self._file,
            show_pos=True,
            show_percent=bool(total),
            show_eta=False,  # ours counts down between updates; click's waits for the next step
            item_show_func=lambda _item: self._figures(),
            width=24,
        )
        self._bar.pos = done

    def _draw(self, now: float) -> None:
        bar = self._bar
        if bar is None:
            return
        self._drawn = now
        step = self._done - bar.pos
        if step:
            bar.update(step)
        else:
            bar.render_progress()

    def _close(self) -> None:
        if self._bar is not None:
            self._closing = True
            self._draw(time.monotonic())
            self._bar.render_finish()
            self._bar, self._closing = None, False

    def _figures(self) -> str:
        """Rate and ETA (or, once finished, the time the stage took)."""
        now = time.monotonic()
        unit = UNITS.get(self._stage, "items")
        bar = self._bar
        total = bar.length if bar is not None else None
        if self._done == self._first or self._changed <= self._started:  # no rate yet: the clock shows life
            return f"… {unit}/s  ETA …  {_clock(now - self._started)}" if total else f"… {unit}/s"
        rate = (self._done - self._first) / (self._changed - self._started)
        figures = f"{_rate(rate)} {unit}/s"
        if self._closing or not total or self._done >= total:
            return f"{figures}  {_clock(now - self._started)}"
        remaining = max(0.0, (total - self._done) / rate - (now - self._changed))
        return f"{figures}  ETA {_clock(remaining)}"

    def _tick(self) -> None:
        while not self._stop.wait(REDRAW_SECONDS):
            with self._lock:
                self._draw(time.monotonic())


def _rate(per_second: float) -> str:
    return f"{per_second:.1f}" if per_second < 100 else f"{per_second:.0f}"


def _clock(seconds: float) -> str:
    whole = int(seconds + 0.5)
    return f"{whole // 3600}:{whole // 60 % 60:02}:{whole % 60:02}"
