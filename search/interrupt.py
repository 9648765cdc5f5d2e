"""What Ctrl-C does to a `notes-search` process, wherever it lands (stdlib only: the warm
client uses it before click is imported)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import NoReturn


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
