"""Crash injection for tests: ``CKPT_FAULT_KILL_AT=N`` SIGKILLs the process at fault point N.

Fault points sit where a crash matters: after each chunk and tensor written, after a file is
renamed into place (before the journal records it), after each journal update, side file,
index, config and the manifest. Tests run a conversion in a child process with a kill point,
then ``--resume`` and compare bytes with an uninterrupted run. Unset (always, outside tests),
a fault point costs one attribute check.

Example::

    CKPT_FAULT_KILL_AT=7 ckpt convert src dst   # killed at the 7th fault point
"""

from __future__ import annotations

import os
import signal
import threading

_ENV = "CKPT_FAULT_KILL_AT"
_lock = threading.Lock()
_count = 0


def fault_point(event: str) -> None:
    """Count one fault point; kill the process when the count reaches ``$CKPT_FAULT_KILL_AT``."""
    target = os.environ.get(_ENV)
    if not target:
        return
    global _count
    with _lock:
        _count += 1
        hit = _count == int(target)
    if hit:
        os.kill(os.getpid(), signal.SIGKILL)


def reset() -> None:
    """Restart the count (a forked test child starts from zero)."""
    global _count
    with _lock:
        _count = 0
