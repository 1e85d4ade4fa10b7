"""An output file written in order and hashed (sha256) as it goes, with as few copies as we can.

Two ways in, freely mixed, always landing in file order:

- **staged bytes**: ``reserve(n)`` gives a writable view of the next ``n`` bytes of the file in
  one of two staging buffers; ``advance(n)`` marks them filled. A full buffer is written
  (``pwrite``) and hashed by helper threads while the caller fills the other one.
- **zero-copy ranges**: ``copy_range(fd, offset, n)`` appends bytes of another file.
  Adjacent ranges merge into runs; a run of at least ``ZERO_COPY_MIN`` bytes is copied by the
  kernel (``os.copy_file_range``, no user-space copy) and hashed from a read-only mapping of the
  *written* pages, window by window, hashing window ``i`` while the kernel copies ``i + 1`` (and
  the last window of a run while the next operation starts).
  Short runs, and file systems where ``copy_file_range`` is refused, go through staging.

Why: sha256 and user-space copies are all the CPU a conversion spends. On the development
machine, per 0.5 GB: ``pread`` + sha256 + ``write`` 0.9-1.3 s CPU, ``copy_file_range`` + sha256
of the mapping 0.66 s (``benchmarks/bench_convert.py --only io``).

With ``writeback=True`` (durable runs) every written range is handed to the kernel's write-back
at once (``posix_fadvise(DONTNEED)``) by a *separate* helper thread, so the disk writes while we
copy and hash, and the final fsync waits for the tail only. The call blocks while the disk queue
is full; made inline it stalled the copy/hash pipeline (2 GB: 5.8 s with the kick inline on the
hash thread, 4.1 s with it on its own thread, ``cp -r; sync`` 3.7 s). ``finish()`` waits for the
kicks still queued (the descriptor must outlive them). One copy or write is in flight at a time
(the next one waits), which keeps the hash in file order.

Example::

    out = HashedOutput(fd, capacity=64 << 20, name="model-00001.safetensors")
    out.reserve(8)[:] = header_len; out.advance(8)
    out.copy_range(src_fd, 4096, 14_680_064)          # a verbatim tensor
    size, sha = out.finish()
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from checkpoint_tool.execute.faults import fault_point
from checkpoint_tool.execute.pages import page_buffer

#: runs shorter than this go through the staging buffer (a mapping per tiny tensor costs more)
ZERO_COPY_MIN = 1 << 20
#: a run is submitted once it reaches this size (bounds the work one cancellation waits for)
MAX_RUN = 1 << 30
#: staged chunks at least this large are hashed on a helper thread while ``pwrite`` copies them
PARALLEL_HASH_MIN = 1 << 20
#: ``copy_file_range`` errors that mean "not here" (another file system, old kernel): fall back
_NO_ZERO_COPY = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}

#: one write-back thread: ranges reach the disk queue in the order they were written
_POOL_SIZES = {"writeback": 1}
_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_pools_lock = threading.Lock()


def _pool(kind: str) -> ThreadPoolExecutor:
    """Helper threads of this process, per kind ("io", "hash", "writeback"); made again in a
    forked child, which has none. Separate kinds: an io task waits for a hash task, never the
    reverse; nothing waits for a writeback task except ``finish``/``discard``."""
    with _pools_lock:
        entry = _pools.get(kind)
        if entry is None or entry[0] != os.getpid():
            size = _POOL_SIZES.get(kind, 32)
            entry = (os.getpid(), ThreadPoolExecutor(size, thread_name_prefix=f"ckpt-{kind}"))
            _pools[kind] = entry
        return entry[1]


class SourceError(OSError):
    """Reading a source file failed; ``filename`` is the label given to ``copy_range``."""


class SourceEnded(SourceError):
    """A source file ended before the range we copy from it (truncated under us)."""


#: errors of ``copy_file_range`` that are about the output, not the source
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


@dataclass
class _Run:
    fd: int
    src: int
    dst: int
    length: int
    label: str


class HashedOutput:
    """Ordered writes into ``fd`` (opened read-write), hashed; see the module docstring."""

    def __init__(self, fd: int, capacity: int, *, writeback: bool = True) -> None:
        self.fd = fd
        self.capacity = capacity
        self.writeback = writeback
        self.zero_copy = hasattr(os, "copy_file_range")  # Linux only
        self._bufs: list[mmap.mmap] = [page_buffer(capacity)]
        self._cur = 0
        self._used = 0
        self._run: _Run | None = None
        self._pending: Future[None] | None = None
        self._hashing: Future[None] | None = None  # the hash a copy left running
        self._kicks: deque[Future[None]] = deque()  # write-back requests not yet done
        self._kicks_lock = threading.Lock()
        self._hash = hashlib.sha256()
        self.size = 0  # bytes submitted to the file so far (staged bytes not included)

    # -- staged bytes -------------------------------------------------------------------------
    def reserve(self, nbytes: int) -> memoryview:
        """A writable view of the next ``nbytes`` of the file (``nbytes <= capacity``)."""
        if nbytes > self.capacity:
            raise ValueError(f"reserve({nbytes}) exceeds the staging buffer ({self.capacity})")
        self._close_run()
        if self._used + nbytes > self.capacity:
            self._flush()
        return memoryview(self._bufs[self._cur])[self._used : self._used + nbytes]

    def advance(self, nbytes: int) -> None:
        self._used += nbytes

    def _flush(self) -> None:
        """Hand the filled staging buffer to the helper threads; switch to the other one."""
        if not self._used:
            return
        data = memoryview(self._bufs[self._cur])[: self._used]
        self._submit(self._write_and_hash, data, self.size)
        self.size += self._used
        self._used = 0
        self._cur ^= 1
        if len(self._bufs) == 1:
            self._bufs.append(page_buffer(self.capacity))

    def _write_and_hash(self, data: memoryview, offset: int) -> None:
        self._wait_hash()  # the hash of the previous operation comes first
        big = len(data) >= PARALLEL_HASH_MIN
        hashing = _pool("hash").submit(self._hash.update, data) if big else None
        try:
            done = 0
            while done < len(data):
                done += os.pwrite(self.fd, data[done:], offset + done)
        finally:
            if hashing is not None:
                hashing.result()  # the staging buffer is reused once we return
        if hashing is None:
            self._hash.update(data)
        self._kick_writeback(offset, len(data))
        fault_point("chunk")

    # -- zero-copy ranges -----------------------------------------------------------------
    def copy_range(self, fd: int, offset: int, nbytes: int, label: str = "") -> None:
        """Append bytes ``[offset, offset + nbytes)`` of file ``fd`` (``label`` names it in
        errors)."""
        if nbytes <= 0:
            return
        run = self._run
        if run and run.fd == fd and run.src + run.length == offset and run.length < MAX_RUN:
            run.length += nbytes
            return
        self._close_run()
        self._flush()  # staged bytes come first in the file
        self._run = _Run(fd, offset, self.size, nbytes, label)

    def _close_run(self) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        if run.length < ZERO_COPY_MIN or not self.zero_copy:
            self._stage_from(run)
            return
        self._submit(self._copy_and_hash, run)
        self.size += run.length

    def _stage_from(self, run: _Run) -> None:
        pos = 0
        while pos < run.length:
            n = min(self.capacity, run.length - pos)
            _pread_exact(run.fd, self.reserve(n), run.src + pos, run.label)
            self.advance(n)
            pos += n

    def _copy_and_hash(self, run: _Run) -> None:
        """Copy ``run`` window by window; hash window ``i`` while the kernel copies ``i + 1``.
        The last window's hash is left running (``self._hashing``) so the next operation
        starts at once: a conversion is a chain of runs of a few MB each (output order is not
        source order), and waiting at every run boundary made copy and hash take turns."""
        window = min(self.capacity, 64 << 20)
        done = 0
        while done < run.length:
            n = min(window, run.length - done)
            if self.zero_copy:
                try:
                    _copy_exact(run, self.fd, n, done)
                except OSError as exc:
                    if exc.errno not in _NO_ZERO_COPY or isinstance(exc, SourceError):
                        raise
                    self.zero_copy = False  # from now on: pread + pwrite
            if not self.zero_copy:
                buf = memoryview(page_buffer(n))
                _pread_exact(run.fd, buf, run.src + done, run.label)
                _pwrite_exact(self.fd, buf, run.dst + done)
                buf.release()
            self._wait_hash()
            self._hashing = _pool("hash").submit(self._hash_written, run.dst + done, n)
            done += n
        fault_point("chunk")

    def _wait_hash(self) -> None:
        """Wait for the hash left running by the last copy; re-raise its error."""
        hashing, self._hashing = self._hashing, None
        if hashing is not None:
            hashing.result()

    def _hash_written(self, offset: int, nbytes: int) -> None:
        """Hash bytes of our own file from a read-only mapping (no copy), then let them go."""
        base = offset - offset % mmap.ALLOCATIONGRANULARITY
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        with mmap.mmap(self.fd, offset + nbytes - base, flags=flags, prot=mmap.PROT_READ,
                       offset=base) as mapping:  # fmt: skip
            view = memoryview(mapping)[offset - base :]
            try:
                self._hash.update(view)
            finally:
                view.release()
        self._kick_writeback(offset, nbytes)

    def _kick_writeback(self, offset: int, nbytes: int) -> None:
        """Queue ``_start_writeback`` of a written range on its own thread (never waited for
        here: a full disk queue must not stall the copy and the hash)."""
        if not self.writeback:
            return
        future = _pool("writeback").submit(_start_writeback, self.fd, offset, nbytes)
        with self._kicks_lock:
            while self._kicks and self._kicks[0].done():
                self._kicks.popleft()
            self._kicks.append(future)

    def _wait_writeback(self) -> None:
        with self._kicks_lock:
            kicks, self._kicks = self._kicks, deque()
        for future in kicks:
            future.result()  # _start_writeback never raises

    # -- in flight --------------------------------------------------------------------------
    def _submit(self, fn, *args) -> None:  # type: ignore[no-untyped-def]
        self.wait()
        self._pending = _pool("io").submit(fn, *args)

    def wait(self) -> None:
        """Wait for the operation in flight; re-raise its error (an ``OSError``)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def finish(self) -> tuple[int, str]:
        """Write everything still staged or pending; return ``(size, sha256 hex)``."""
        self._close_run()
        self._flush()
        try:
            self.wait()
            self._wait_hash()
        finally:
            self._wait_writeback()
        self._bufs = []
        return self.size, self._hash.hexdigest()

    def discard(self) -> None:
        """Wait for what is in flight (errors ignored) and drop the buffers."""
        self._run = None
        for wait in (self.wait, self._wait_hash):
            try:
                wait()
            except OSError:
                pass
        self._wait_writeback()
        self._bufs = []


def _copy_exact(run: _Run, dst: int, nbytes: int, start: int) -> None:
    """``copy_file_range`` bytes ``[start, start + nbytes)`` of ``run``."""
    done = 0
    src_off, dst_off = run.src + start, run.dst + start
    while done < nbytes:
        try:
            k = os.copy_file_range(run.fd, dst, nbytes - done, src_off + done, dst_off + done)
        except OSError as exc:
            if exc.errno in _OUTPUT_ERRNOS or exc.errno in _NO_ZERO_COPY:
                raise
            raise SourceError(exc.errno, f"copy failed: {exc.strerror}", run.label) from exc
        if k == 0:
            raise SourceEnded(errno.EIO, f"file ends at byte {src_off + done}", run.label)
        done += k


def _pread_exact(fd: int, view: memoryview, offset: int, label: str) -> None:
    done = 0
    while done < len(view):
        try:
            k = os.preadv(fd, [view[done:]], offset + done)
        except OSError as exc:
            raise SourceError(
                exc.errno, f"read error at byte {offset + done} ({exc.strerror})", label
            ) from exc
        if k == 0:
            raise SourceEnded(errno.EIO, f"file ends at byte {offset + done}", label)
        done += k


def _pwrite_exact(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a range to disk now (and drop it from the page cache
    once clean), so the fsync at commit waits for the tail only: the disk works while we copy."""
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        except OSError:  # advisory only
            pass
