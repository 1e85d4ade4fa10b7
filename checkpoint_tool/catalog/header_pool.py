"""Read many safetensors headers on two cores: this process and one forked child.

Parsing a header is pure Python work (JSON, then the checks of ``read_header``): ~0.5 s for
the 163 shards / 92k tensors of DeepSeek-R1. On Linux with more than one core and at least
``MIN_FILES`` files, a forked child parses the second half and sends the results back
through a pipe (``marshal``: plain tuples, dicts and strings, no pickle), while this process
parses the first half. Results and errors are exactly those of ``read_header`` in file
order: the first failing file's ``InputError`` takes the place of its header and nothing
after it is returned. If the child cannot be used (no fork, it dies, it fails
unexpectedly, other threads run here), this process reads its files itself.

Example::

    read_headers([Path("m/model-00001-of-00002.safetensors"), ...])
    # [FileHeader(...), FileHeader(...)]  or  [FileHeader(...), InputError(...)]
"""

from __future__ import annotations

import marshal
import os
import signal
import sys
import threading
from pathlib import Path

from checkpoint_tool.catalog.safetensors_format import FileHeader, read_header
from checkpoint_tool.errors import InputError

#: fewer files than this are read here: a fork and a pipe cost ~10 ms
MIN_FILES = 16


def read_headers(paths: list[Path]) -> list[FileHeader | InputError]:
    """``read_header`` of each path, in order, stopping after the first ``InputError``."""
    if (
        len(paths) < MIN_FILES
        or sys.platform != "linux"
        or (os.cpu_count() or 1) < 2
        or threading.active_count() > 1  # never fork a process with other threads
    ):
        return _read_serial(paths)
    half = len(paths) // 2
    child = _Child(paths[half:])
    try:
        mine = _read_serial(paths[:half])
    except BaseException:
        child.abandon()
        raise
    if isinstance(mine[-1], InputError):  # an earlier file failed: the child's files don't count
        child.abandon()
        return mine
    theirs = child.collect()
    if theirs is None:
        theirs = _read_serial(paths[half:])
    return mine + theirs


def _read_serial(paths: list[Path]) -> list[FileHeader | InputError]:
    out: list[FileHeader | InputError] = []
    for path in paths:
        try:
            out.append(read_header(path))
        except InputError as exc:
            out.append(exc)
            break
    return out


class _Child:
    """A forked process reading ``paths``; its answer is one marshal blob on a pipe."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.pid = -1
        self.fd = -1
        try:
            read_fd, write_fd = os.pipe()
            pid = os.fork()
        except OSError:
            return  # no child: the parent reads these files
        if pid == 0:  # the child: answer, then leave without running any parent cleanup
            code = 0
            try:
                os.close(read_fd)
                _answer(write_fd, paths)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(write_fd)
        self.pid, self.fd = pid, read_fd

    def collect(self) -> list[FileHeader | InputError] | None:
        """The child's headers, or None when it gave no complete answer."""
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
            records = marshal.loads(b"".join(chunks))
        except (EOFError, ValueError, TypeError):
            return None
        return [_header(path, rec) for path, rec in zip(self.paths, records, strict=False)]

    def abandon(self) -> None:
        if self.pid < 0:
            return
        os.close(self.fd)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self.pid = -1


def _answer(fd: int, paths: list[Path]) -> None:
    records: list[tuple] = []
    for path in paths:
        try:
            h = read_header(path)
        except InputError as exc:
            records.append(("error", exc.message, exc.exit_code))
            break
        records.append((h.header_len, h.file_size, h.entries, h.metadata))
    data = memoryview(marshal.dumps(records))
    while data:
        data = data[os.write(fd, data) :]
    os.close(fd)


def _header(path: Path, rec: tuple) -> FileHeader | InputError:
    if rec[0] == "error":
        return InputError(rec[1], exit_code=rec[2])
    header_len, file_size, entries, metadata = rec
    return FileHeader(path, header_len, file_size, entries, metadata)
