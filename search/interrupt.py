"""What Ctrl-C, or a reader that stops reading, does to a `notes-search` process, wherever it
lands (stdlib only: the warm client uses it before click is imported)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import threading
    from collections.abc import Iterator


def interrupted() -> NoReturn:
    """End as a process that SIGINT killed, as ripgrep and git do, without click's `Aborted!`
    or a traceback. The shell sees 130, and a shell loop around the command stops (a plain
    exit 130 would let it run on). Call it once the stack has unwound (`finally` blocks run)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream has nothing left to say
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    sys.exit(130)  # where SIGINT does not end a process


def output_closed() -> NoReturn:
    """End quietly with 0 once the reader of our output is gone (`| head -3`, fzf starting its
    next reload), as ripgrep does: what it read was printed. Click's own handler exits 1, which
    for `query` and `grep` says "nothing matched", and the warm client printed a traceback.
    Both streams go to /dev/null first, so that the flush at exit finds no broken pipe either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # a stream without a file: nothing to mend
            os.dup2(devnull, stream.fileno())
    sys.exit(0)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[list[int]]:
    """While inside, SIGTERM and SIGINT set `stop` (a foreground service's clean stop) instead
    of ending the process; yields the signals received, so that after a Ctrl-C the service can
    end with `interrupted()` once it has stopped."""
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
