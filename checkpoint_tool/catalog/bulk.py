"""Build large acyclic structures without the cyclic garbage collector re-scanning them.

CPython's cycle collector runs after every 700 net container allocations and, every so often,
walks every live object. Opening the catalog of a full-size DeepSeek-R1 (~92k tensors)
allocates about a million containers (JSON dicts and lists, entries, tuples), none of them in
a reference cycle: those walks find nothing, yet they cost about as much CPU as the parsing
itself. Reference counting still frees everything as usual inside the block; only the cycle
detector waits until it ends.

Example::

    with gc_paused():
        entries = {name: TensorEntry(...) for name, ... in header.entries}
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause automatic cycle collection for the block (re-entrant; restores the prior state)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
