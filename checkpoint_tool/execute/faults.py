"""Crash injection for tests: ``CKPT_FAULT_KILL_AT=N`` SIGKILLs the process at fault point N.

Fault points sit after every step of the executor that changes DST: each temporary created,
each chunk and tensor written, each small file's bytes written, each fsync of a file or a
folder (counted with ``--no-fsync`` too, so the count does not depend on it), each rename into
place, each journal or part record update, each unlink (``--overwrite`` clearing an earlier
output, partials on resume, the journal and part records at the end), and the manifest. With
one worker the points of a run are deterministic: ``CKPT_FAULT_KILL_AT=1..N`` enumerates every
crash point (``tests/execute/test_crash_points.py``; ``benchmarks/crash_sweep.py`` for every
mode). Unset (always, outside tests), a fault point costs one dictionary lookup.

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
