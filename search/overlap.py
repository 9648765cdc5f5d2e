"""A few shared worker threads for the part of a search that can run beside the rest: the query's
embedding (a model's inference or an embedding server's round trip) while the keyword half
queries the index, and on a backend that can share a snapshot between connections, the vector
search itself.

Bounded on purpose: a long-lived server answers many searches at once, and a search that finds
every worker busy runs its halves one after the other (as it would without them) instead of
queueing behind other searches or starting a thread of its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

WORKERS = 4  # searches whose halves overlap at once; more run theirs in turn

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_running = 0  # work started and not yet done
_pid = os.getpid()


def _pool() -> ThreadPoolExecutor:
    global _executor, _running, _pid
    with _lock:
        if _pid != os.getpid():  # a forked child has the parent's pool object but none of its threads
            _executor = None
            _running = 0
            _pid = os.getpid()
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="search-half")
        return _executor


def busy() -> bool:
    """Whether every worker is taken now (a hint: `apart` decides)."""
    _pool()  # after a fork, the parent's work is not this process's
    return _running >= WORKERS


def apart(work: Callable[[], T]) -> Future[T] | None:
    """Start `work` on a free shared worker; None (nothing started) when every worker is busy,
    and the caller runs it itself."""
    global _running
    pool = _pool()
    with _lock:
        if _running >= WORKERS:
            return None
        _running += 1
    try:
        future = pool.submit(work)
    except BaseException:
        _done()
        raise
    future.add_done_callback(lambda _: _done())
    return future


def _done() -> None:
    global _running
    with _lock:
        _running = max(0, _running - 1)
