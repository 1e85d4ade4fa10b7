"""Read-only file descriptors by path, shared by threads, closed together; whole byte ranges
read with ``os.preadv`` (one copy, the GIL released), short reads and faults as one-line errors.

Example: ``files = Files(); files.read(Path("model-00001-of-00002.safetensors"), 8, 4096)``
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from checkpoint_tool.errors import InputError


class Files:
    """Read-only descriptors by path, shared by threads, closed together."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}
        self._lock = threading.Lock()

    def fd(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is None:
            with self._lock:
                fd = self._fds.get(path)
                if fd is None:
                    try:
                        fd = self._fds[path] = os.open(path, os.O_RDONLY)
                    except OSError as exc:
                        raise InputError(f"{path}: cannot open ({exc.strerror})") from exc
        return fd

    def read_into(self, path: Path, buf: bytearray | memoryview, begin: int) -> None:
        """Fill ``buf`` with the file's bytes from ``begin`` (InputError naming the file)."""
        fd, view, got = self.fd(path), memoryview(buf), 0
        while got < len(buf):
            try:
                n = os.preadv(fd, [view[got:]], begin + got)
            except OSError as exc:
                raise InputError(
                    f"{path}: read error at byte {begin + got} ({exc.strerror})"
                ) from exc
            if n == 0:
                raise InputError(
                    f"{path}: file ends at byte {begin + got}, expected data up to "
                    f"{begin + len(buf)}; the file is truncated, re-download it"
                )
            got += n

    def read(self, path: Path, begin: int, end: int) -> bytes:
        out = bytearray(end - begin)
        self.read_into(path, out, begin)
        return bytes(out)

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
