"""Progress of a conversion: a rich bar on a terminal, plain lines otherwise (CI logs).

Workers call ``advance(nbytes)`` as chunks are written and ``file_done(name, nbytes)`` per output
file; both are thread-safe. ``make_progress(enabled)`` picks the renderer: a rich bar (bytes with
rate and ETA, files done) when stderr is a TTY, one line per finished file otherwise, nothing
when disabled.

Example (plain)::

    [ 3/12] model-00003-of-00012.safetensors  4.98 GB  (14.9/59.8 GB, 1.21 GB/s)
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Protocol

from rich.console import Console


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"


class Progress(Protocol):
    def start(self, total_bytes: int, total_files: int) -> None: ...
    def advance(self, nbytes: int) -> None: ...
    def file_done(self, name: str, nbytes: int, *, skipped: bool = False) -> None: ...
    def note(self, message: str) -> None: ...
    def close(self) -> None: ...


class NullProgress:
    def start(self, total_bytes: int, total_files: int) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass

    def file_done(self, name: str, nbytes: int, *, skipped: bool = False) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def close(self) -> None:
        pass


class LineProgress:
    """One line per finished file on stderr: quiet enough for CI logs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._done_bytes = 0
        self._done_files = 0
        self._total_bytes = 0
        self._total_files = 0

    def start(self, total_bytes: int, total_files: int) -> None:
        self._t0 = time.monotonic()
        self._total_bytes, self._total_files = total_bytes, total_files

    def advance(self, nbytes: int) -> None:
        pass

    def file_done(self, name: str, nbytes: int, *, skipped: bool = False) -> None:
        with self._lock:
            self._done_files += 1
            self._done_bytes += nbytes
            rate = self._done_bytes / max(time.monotonic() - self._t0, 1e-9)
            width = len(str(self._total_files))
            what = "verified, kept" if skipped else f"{human_bytes(rate)}/s"
            print(
                f"[{self._done_files:>{width}}/{self._total_files}] {name}  {human_bytes(nbytes)}"
                f"  ({human_bytes(self._done_bytes)}/{human_bytes(self._total_bytes)}, {what})",
                file=sys.stderr,
                flush=True,
            )

    def note(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


class RichProgress:
    """One rich bar on stderr: bytes (size, rate, ETA) and the count of files done.

    ``label`` names the work (``convert``, ``verify lossless``); a ``transient`` bar is erased
    when it closes.
    """

    def __init__(
        self, console: Console | None = None, *, label: str = "convert", transient: bool = False
    ) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._bars = Progress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            DownloadColumn(binary_units=False),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[files]}"),
            console=console or Console(stderr=True),
            transient=transient,
        )
        self._lock = threading.Lock()
        self._files_done = 0
        self._files_total = 0
        self._task = self._bars.add_task(label, total=None, files="", visible=False)

    def start(self, total_bytes: int, total_files: int) -> None:
        self._files_total = total_files
        self._bars.update(
            self._task, total=total_bytes, files=f"0/{total_files} files", visible=True
        )
        self._bars.start()

    def advance(self, nbytes: int) -> None:
        self._bars.advance(self._task, nbytes)

    def file_done(self, name: str, nbytes: int, *, skipped: bool = False) -> None:
        with self._lock:
            self._files_done += 1
            files = f"{self._files_done}/{self._files_total} files"
        if skipped:
            self._bars.advance(self._task, nbytes)
        self._bars.update(self._task, files=files)

    def note(self, message: str) -> None:
        self._bars.console.print(message)

    def close(self) -> None:
        self._bars.stop()


def make_progress(enabled: bool) -> Progress:
    if not enabled:
        return NullProgress()
    if sys.stderr.isatty():
        return RichProgress()
    return LineProgress()
