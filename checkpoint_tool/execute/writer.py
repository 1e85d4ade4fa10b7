"""Atomic, streaming safetensors file writer.

Write a file's header first (all shapes are known from the plan), then each tensor's bytes in
order, hashing as we go (on helper threads, overlapped with the writes). The file lives under
``.NAME.partial`` until ``commit()``: fsync, rename to the final name, fsync the folder. A crash
never leaves an incomplete file under a final name.

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
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from checkpoint_tool.catalog.safetensors_format import build_header, gpt_oss_header_shape
from checkpoint_tool.errors import CkptError, InputError, OutputError
from checkpoint_tool.execute.faults import fault_point
from checkpoint_tool.execute.hashed_output import HashedOutput, SourceEnded, SourceError

#: fsync files and folders before/after renames (durability across power loss). Tests that only
#: simulate process kills may turn it off: a rename is atomic for other processes either way.
#: One run turns it off with ``durable=False`` (``ckpt convert --no-fsync``).
DURABLE = True


def fsync(fd: int, durable: bool = True) -> None:
    """``os.fsync`` unless durability is switched off (``durable=False`` or tests); a fault
    point either way (``execute.faults``)."""
    if durable and DURABLE:
        os.fsync(fd)
    fault_point("fsync")


#: default staging buffer size (two per writer; the executor passes its own)
DEFAULT_BUFFER = 64 << 20


def partial_name(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial")


class SafetensorsWriter:
    """Write one safetensors file atomically; tensors must be written in header order.

    Callers either hand over bytes (``write``, ``write_chunks``: copied into a staging buffer),
    or, between ``begin_tensor(name)`` and ``end_tensor()``, fill the staging buffer in place
    (``reserve(n)`` -> writable view, ``advance(n)``) and append ranges of source files
    (``copy_range(fd, offset, n)``: zero-copy where the kernel can). See ``hashed_output``.
    """

    def __init__(
        self,
        path: Path,
        tensors: list[tuple[str, str, tuple[int, ...]]],
        metadata: dict[str, str] | None = None,
        *,
        buffer_size: int = DEFAULT_BUFFER,
        durable: bool = True,
    ) -> None:
        self.path = Path(path)
        self.durable = durable and DURABLE
        self.tmp = partial_name(self.path)
        # gpt-oss's expert blocks go out in the producer's [E, R, G, 16] (the same bytes)
        header = [(n, d, tuple(gpt_oss_header_shape(n, d, sh))) for n, d, sh in tensors]
        prefix, offsets = build_header(header, metadata)
        self._expected = [
            (name, end - begin) for (name, _, _), (begin, end) in zip(tensors, offsets, strict=True)
        ]
        total = len(prefix) + (offsets[-1][1] if offsets else 0)
        self.capacity = max(1, min(buffer_size, total))
        self._next = 0
        self._in_tensor: str | None = None
        self._tensor_bytes = 0
        self.size = 0
        self.sha256 = ""
        self._fd: int | None = None
        try:
            self._fd = os.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise write_error(self.tmp, exc, "cannot create") from exc
        fault_point("create")
        self._out = HashedOutput(self._fd, self.capacity, writeback=self.durable)
        self._copy_in(prefix)

    # -- bytes in ---------------------------------------------------------------------------
    def reserve(self, nbytes: int) -> memoryview:
        """A writable view of the next ``nbytes`` of the file (``nbytes <= capacity``)."""
        try:
            return self._out.reserve(nbytes)
        except OSError as exc:  # an earlier write failed
            raise self._failed(exc) from exc

    def advance(self, nbytes: int) -> None:
        """Mark ``nbytes`` of the reserved view as filled."""
        self._count(nbytes)
        self._out.advance(nbytes)

    def copy_range(self, fd: int, offset: int, nbytes: int, label: str = "") -> None:
        """Append bytes ``[offset, offset + nbytes)`` of file ``fd`` (named ``label`` in
        errors) to the current tensor."""
        self._count(nbytes)
        try:
            self._out.copy_range(fd, offset, nbytes, label)
        except OSError as exc:
            raise self._failed(exc) from exc

    def _count(self, nbytes: int) -> None:
        if self._in_tensor is not None:
            self._tensor_bytes += nbytes
            exp_name, exp_len = self._expected[self._next]
            if self._tensor_bytes > exp_len:
                self._internal_error(self._in_tensor, f">{exp_len}", exp_name, exp_len)

    def _copy_in(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        pos = 0
        while pos < len(view):
            n = min(self.capacity, len(view) - pos)
            self.reserve(n)[:] = view[pos : pos + n]
            self.advance(n)
            pos += n

    # -- tensors ----------------------------------------------------------------------------
    def begin_tensor(self, name: str) -> None:
        if self._next >= len(self._expected):
            self._internal_error(name, "?", "<nothing>", 0)
        exp_name, exp_len = self._expected[self._next]
        if name != exp_name:
            self._internal_error(name, "?", exp_name, exp_len)
        self._in_tensor, self._tensor_bytes = name, 0

    def end_tensor(self) -> None:
        exp_name, exp_len = self._expected[self._next]
        if self._tensor_bytes != exp_len:
            self._internal_error(exp_name, str(self._tensor_bytes), exp_name, exp_len)
        self._in_tensor = None
        self._next += 1
        fault_point("tensor")

    def write(self, name: str, data: bytes | memoryview) -> None:
        """Append the bytes of the next tensor; ``name`` and length must match the header."""
        self.write_chunks(name, [data])

    def write_chunks(self, name: str, chunks: Iterable[bytes | memoryview]) -> None:
        """Append the next tensor from a stream of chunks (each may be reused afterwards)."""
        self.begin_tensor(name)
        for data in chunks:
            self._copy_in(data)
        self.end_tensor()

    def _internal_error(self, name: str, got: str, exp_name: str, exp_len: int) -> None:
        self.abort()
        raise OutputError(
            f"{self.path}: internal error: tensor {name!r} ({got} bytes) written where "
            f"{exp_name!r} ({exp_len} bytes) was planned"
        )

    def _failed(self, exc: OSError) -> CkptError:
        """Abort and turn a failed write or copy into one line."""
        self.abort()
        if isinstance(exc, SourceEnded):
            return InputError(
                f"{exc.filename}: {exc.strerror}, before the data its header promises; the shard "
                "changed or is truncated: re-download it, then --resume"
            )
        if isinstance(exc, SourceError):
            return InputError(
                f"{exc.filename}: {exc.strerror}; check the disk or re-download the shard"
            )
        return write_error(self.path, exc, "write failed")

    # -- the end ----------------------------------------------------------------------------
    def commit(self) -> None:
        """Write what is staged, fsync, rename to the final name; hash and size are then final."""
        if self._next != len(self._expected):
            missing = self._expected[self._next][0]
            self.abort()
            raise OutputError(f"{self.path}: internal error: tensor {missing!r} was never written")
        try:
            self.size, sha = self._out.finish()
        except OSError as exc:
            raise self._failed(exc) from exc
        try:
            fsync(self._fd, self.durable)  # type: ignore[arg-type]
            os.close(self._fd)  # type: ignore[arg-type]
            self._fd = None
            os.replace(self.tmp, self.path)
            fsync_dir(self.path.parent, self.durable)
        except OSError as exc:
            self.abort()
            raise write_error(self.path, exc, "cannot finalize") from exc
        self.sha256 = sha
        fault_point("commit")

    def abort(self) -> None:
        """Stop, close and remove the temporary file (idempotent, never raises a write error)."""
        out = getattr(self, "_out", None)
        if out is not None:
            out.discard()
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


def fsync_dir(folder: Path, durable: bool = True) -> None:
    """fsync a directory so a rename inside it is durable (a fault point either way)."""
    if durable and DURABLE:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fault_point("fsync_dir")


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = True) -> str:
    """Write a small file (JSON, config) atomically; return its sha256."""
    return write_chunks_atomic(path, [data], durable=durable)[1]


def write_chunks_atomic(
    path: Path, chunks: Iterable[bytes], *, durable: bool = True
) -> tuple[int, str]:
    """Write a file from ``chunks`` atomically (a temporary, fsync, rename), hashing as it
    goes; its size and sha256: ``(1234, "9f86d0...")``."""
    path = Path(path)
    tmp = partial_name(path)
    h, size = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as fh:
            for data in chunks:
                fh.write(data)
                h.update(data)
                size += len(data)
            fh.flush()
            fault_point("write")
            fsync(fh.fileno(), durable)
        os.replace(tmp, path)
        fault_point("rename")
        fsync_dir(path.parent, durable)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(path, exc, "cannot write") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size, h.hexdigest()


def write_error(path: Path, exc: OSError, what: str) -> OutputError:
    """One line for a failed write: disk full and file-size limits say what to do."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(f"{path}: disk full while writing; free space and rerun with --resume")
    if exc.errno == errno.EFBIG:
        return OutputError(
            f"{path}: file too large for this file system or ulimit -f; lower --max-shard-size "
            "or raise the limit, then rerun with --resume"
        )
    return OutputError(f"{path}: {what} ({exc.strerror}); check the destination, then --resume")
