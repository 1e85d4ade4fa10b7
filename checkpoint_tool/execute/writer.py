"""Atomic, streaming safetensors file writer.

Write a file's header first (all shapes are known from the plan), then each tensor's bytes in
order, hashing as we go. The file lives under ``.NAME.partial`` until ``commit()``: fsync,
rename to the final name, fsync the folder. A crash never leaves an incomplete file under a
final name.

Example::

    with SafetensorsWriter(dst / "model-00001-of-00002.safetensors",
                           [("a.weight", "BF16", (4, 8))], metadata={"format": "pt"}) as w:
        w.write("a.weight", tensor_bytes)
    w.sha256, w.size   # ('9f86d0...', 96)
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

from checkpoint_tool.catalog.safetensors_format import build_header
from checkpoint_tool.errors import OutputError
from checkpoint_tool.execute.faults import fault_point

#: fsync files and folders before/after renames (durability across power loss). Tests that only
#: simulate process kills may turn it off: a rename is atomic for other processes either way.
DURABLE = True


def fsync(fd: int) -> None:
    """``os.fsync`` unless durability is switched off (tests)."""
    if DURABLE:
        os.fsync(fd)


#: chunks at least this large are hashed on ``_HASHER`` while ``os.write`` copies them
PARALLEL_HASH_MIN = 1 << 20
_hasher: tuple[int, ThreadPoolExecutor] | None = None
_hasher_lock = threading.Lock()


def _hash_pool() -> ThreadPoolExecutor:
    """The hashing threads of this process (made again in a forked child, which has none)."""
    global _hasher
    with _hasher_lock:
        if _hasher is None or _hasher[0] != os.getpid():
            pool = ThreadPoolExecutor(os.cpu_count() or 2, thread_name_prefix="ckpt-sha256")
            _hasher = (os.getpid(), pool)
        return _hasher[1]


def partial_name(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial")


class SafetensorsWriter:
    """Write one safetensors file atomically; tensors must be written in header order."""

    def __init__(
        self,
        path: Path,
        tensors: list[tuple[str, str, tuple[int, ...]]],
        metadata: dict[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.tmp = partial_name(self.path)
        prefix, offsets = build_header(tensors, metadata)
        self._expected = [
            (name, end - begin) for (name, _, _), (begin, end) in zip(tensors, offsets, strict=True)
        ]
        self._next = 0
        self._hash = hashlib.sha256()
        self.size = 0
        self.sha256 = ""
        self._fd: int | None = None
        try:
            self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise _os_error(self.tmp, exc, "cannot create") from exc
        self._write_raw(prefix)

    def _write_raw(self, data: bytes | memoryview) -> None:
        """Write all of ``data`` and hash it; big chunks are hashed on a helper thread while the
        kernel copies them (both release the GIL), so the caller may reuse ``data`` on return."""
        view = memoryview(data).cast("B")
        pending = (
            _hash_pool().submit(self._hash.update, view) if len(view) >= PARALLEL_HASH_MIN else None
        )
        try:
            done = 0
            while done < len(view):
                done += os.write(self._fd, view[done:])  # type: ignore[arg-type]
        except OSError as exc:
            if pending is not None:
                pending.result()
            self.abort()
            raise _os_error(self.path, exc, "write failed") from exc
        if pending is not None:
            pending.result()
        else:
            self._hash.update(view)
        self.size += len(view)

    def write(self, name: str, data: bytes | memoryview) -> None:
        """Append the bytes of the next tensor; ``name`` and length must match the header."""
        self.write_chunks(name, [data])

    def write_chunks(self, name: str, chunks: Iterable[bytes | memoryview]) -> None:
        """Append the next tensor from a stream of chunks (each may be reused afterwards)."""
        exp_name, exp_len = self._expected[self._next]
        if name != exp_name:
            self._internal_error(name, "?", exp_name, exp_len)
        got = 0
        for data in chunks:
            got += len(data)
            if got > exp_len:
                self._internal_error(name, f">{exp_len}", exp_name, exp_len)
            self._write_raw(data)
            fault_point("chunk")
        if got != exp_len:
            self._internal_error(name, str(got), exp_name, exp_len)
        self._next += 1
        fault_point("tensor")

    def _internal_error(self, name: str, got: str, exp_name: str, exp_len: int) -> None:
        self.abort()
        raise OutputError(
            f"{self.path}: internal error: tensor {name!r} ({got} bytes) written where "
            f"{exp_name!r} ({exp_len} bytes) was planned"
        )

    def commit(self) -> None:
        """fsync and rename to the final name; the hash and size are then final."""
        if self._next != len(self._expected):
            missing = self._expected[self._next][0]
            self.abort()
            raise OutputError(f"{self.path}: internal error: tensor {missing!r} was never written")
        try:
            fsync(self._fd)  # type: ignore[arg-type]
            os.close(self._fd)  # type: ignore[arg-type]
            self._fd = None
            os.replace(self.tmp, self.path)
            fsync_dir(self.path.parent)
        except OSError as exc:
            self.abort()
            raise _os_error(self.path, exc, "cannot finalize") from exc
        self.sha256 = self._hash.hexdigest()
        fault_point("commit")

    def abort(self) -> None:
        """Close and remove the temporary file (idempotent)."""
        try:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)
        finally:
            self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> SafetensorsWriter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            self.commit()
        else:
            self.abort()


def fsync_dir(folder: Path) -> None:
    """fsync a directory so a rename inside it is durable."""
    if not DURABLE:
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> str:
    """Write a small file (JSON, config) atomically; return its sha256."""
    path = Path(path)
    tmp = partial_name(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        if tmp.exists():
            tmp.unlink()
        raise _os_error(path, exc, "cannot write") from exc
    return hashlib.sha256(data).hexdigest()


def _os_error(path: Path, exc: OSError, what: str) -> OutputError:
    """One line for a failed write: disk full and file-size limits say what to do."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(f"{path}: disk full while writing; free space and rerun with --resume")
    if exc.errno == errno.EFBIG:
        return OutputError(
            f"{path}: file too large for this file system or ulimit -f; lower --max-shard-size "
            "or raise the limit, then rerun with --resume"
        )
    return OutputError(f"{path}: {what} ({exc.strerror}); check the destination, then --resume")
