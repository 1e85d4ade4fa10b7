"""Per-layer progress of a long numeric check: a rich bar on a terminal.

``RichLayerProgress`` shows layers done of the selected ones, the elapsed time, the ETA and the
last layer's verdict and seconds (``read / decode / reference / runtime``), so a 58-layer
``--layers all`` run says where it is. ``ckpt verify`` uses it when stderr is a terminal; the
JSON report carries the same per-layer seconds for CI logs.

Example (one line, redrawn)::

    verify numeric ━━━━━━━━━━╸━━━━━━━  23/58  0:00:41 < 0:01:02  layer 31 passed 1.7 s
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from checkpoint_tool.verify.report import LayerResult


class RichLayerProgress:
    """``verify.numeric.LayerProgress`` drawn by rich on stderr (erased when done)."""

    def __init__(self, console: Console | None = None) -> None:
        self._bars = Progress(
            TextColumn("[bold]verify numeric"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("<"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[last]}"),
            console=console or Console(stderr=True),
            transient=True,
        )
        self._task = self._bars.add_task("numeric", total=None, last="")

    def start(self, total: int) -> None:
        self._bars.update(self._task, total=total)
        self._bars.start()

    def layer_done(self, result: LayerResult) -> None:
        last = (
            f"layer {result.layer} {result.status} {result.seconds:.1f} s "
            f"(read {result.read_seconds:.1f}, decode {result.decode_seconds:.1f}, "
            f"reference {result.reference_seconds:.1f}, runtime {result.runtime_seconds:.1f})"
        )
        self._bars.update(self._task, advance=1, last=last)

    def close(self) -> None:
        self._bars.stop()
