"""Run a pure-Python function on the second core: a forked child computes, this process goes on.

ckpt's header-only work on a full-size checkpoint (~92k tensors) is pure Python, bound to one
core by the interpreter lock. Where two independent pieces exist (the two halves of the
headers; two halves of the per-module findings), one runs in a forked child that shares the
parent's memory copy-on-write and sends its result back through a pipe as one ``marshal``
blob (plain tuples, lists, dicts, strings and numbers: no pickle, no objects).

``spread_map(fn, items)`` is the common use: ``[fn(x) for x in items]`` with the first part
of a long list computed in a child meanwhile; a caller passes it to a step that takes a
``spread`` (``quant.findings.catalog_findings``), which otherwise runs inline.

Used only where forking is safe and useful: Linux, two cores or more, and no other thread
in this process. ``result()`` is None whenever the child gave no complete answer (it
failed, was killed, or could not start): callers then compute the same thing themselves,
so the output never depends on whether a child ran.

Example::

    child = Forked(sum_of_squares, numbers)     # starts now
    mine = other_work()                        # meanwhile, here
    total = child.result()                     # its return value, or None
    if total is None:
        total = sum_of_squares(numbers)
"""

from __future__ import annotations

import marshal
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: ckpt's own executor pools (``execute.hashed_output``) are named so; they sit idle outside
#: ``execute_plan``, which never forks, and a child never touches them
OWN_IDLE_THREADS = "ckpt-"


def can_fork() -> bool:
    """Whether a forked helper can run beside this process (and is safe to fork here): never
    beside threads other than ckpt's own idle pools (a child could inherit a held lock)."""
    me = threading.current_thread()
    foreign = any(
        t is not me and not t.name.startswith(OWN_IDLE_THREADS) for t in threading.enumerate()
    )
    return (
        sys.platform == "linux"
        and (os.cpu_count() or 1) >= 2
        and not foreign
        and os.environ.get("CKPT_NO_FORK", "") in ("", "0")
    )


class Forked:
    """``fn(*args)`` in a forked child; its return value must be ``marshal``-able."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.pid = -1
        self.fd = -1
        try:
            read_fd, write_fd = os.pipe()
            pid = os.fork()
        except OSError:
            return  # no child: result() is None and the caller computes
        if pid == 0:  # the child: answer, then leave without running any parent cleanup
            code = 0
            try:
                os.close(read_fd)
                data = memoryview(marshal.dumps(fn(*args)))
                while data:
                    data = data[os.write(write_fd, data) :]
                os.close(write_fd)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(write_fd)
        self.pid, self.fd = pid, read_fd

    @property
    def started(self) -> bool:
        return self.pid >= 0

    def result(self) -> Any | None:
        """The child's return value (waiting for it), or None when it gave no answer."""
        if self.pid < 0:
            return None
        chunks = []
        with os.fdopen(self.fd, "rb") as pipe:
            while chunk := pipe.read(1 << 20):
                chunks.append(chunk)
        _, status = os.waitpid(self.pid, 0)
        self.pid = -1
        if status != 0:
            return None
        try:
            return marshal.loads(b"".join(chunks))
        except (EOFError, ValueError, TypeError):
            return None

    def __del__(self) -> None:  # an answer nobody asked for: do not leave the child blocked
        try:
            self.abandon()
        except OSError:
            pass

    def abandon(self) -> None:
        """Stop the child and forget its answer."""
        if self.pid < 0:
            return
        os.close(self.fd)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self.pid = -1


#: ``spread_map`` forks only for at least this many items (a fork and the answer's trip
#: through the pipe cost a few ms; a full DeepSeek-R1 has ~46k modules to check)
SPREAD_MIN_ITEMS = 8192
#: the child's share of the items; this process maps the rest meanwhile
SPREAD_CHILD_SHARE = 0.5


def spread_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, the first part computed in a forked child when there are
    many items and forking is safe (``can_fork``); ``fn``'s results must be ``marshal``-able.

    The answer does not depend on whether a child ran: a child that gives no answer has its
    part computed here. Example: ``spread_map(len, ["ab", "c"])`` -> ``[2, 1]``.
    """
    if len(items) < SPREAD_MIN_ITEMS or not can_fork():
        return [fn(x) for x in items]
    cut = int(len(items) * SPREAD_CHILD_SHARE)
    child = Forked(_map, fn, items[:cut])
    mine = [fn(x) for x in items[cut:]]
    theirs = child.result()
    if theirs is None:
        theirs = [fn(x) for x in items[:cut]]
    return [*theirs, *mine]


def _map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    return [fn(x) for x in items]
