"""Stream the bytes of one output tensor into a sink in bounded pieces, in output order.

The sink is the writer's staging buffer (``SafetensorsWriter.reserve(n)`` gives a writable view
of the next ``n`` bytes of the file, ``advance(n)`` marks them filled), so source bytes land
where they belong with one copy. Three cases, chosen per node of ``execute.ops``:

1. one contiguous source byte range (a verbatim tensor, or a dim-0 region such as a TP slice of
   gate/up rows): handed to the sink's ``copy_range`` (the writer merges adjacent ranges and
   lets the kernel copy them), else ``pread`` straight into the sink;
2. a concat/stack along dim 0: stream each child in turn;
3. anything else (inner-dim regions, pads, concat/stack on inner dims): blocks of output rows;
   each block reads the covering source rows as one range into the read buffer and gathers them
   with one strided numpy copy into the sink. A row larger than the budget is split into rows.

Memory: the sink's buffers and one read buffer of ``reader.capacity`` bytes per worker.

Example::

    stream = TensorStream(reader)
    writer.begin_tensor(out_tensor.name)
    stream.fill(build_node(out_tensor, catalog.tensors), writer)
    writer.end_tensor()
"""

from __future__ import annotations

import math
import threading
from typing import Protocol

import numpy as np

from checkpoint_tool.execute.ops import CombineNode, Node
from checkpoint_tool.execute.source import RangeReader


class Cancelled(Exception):
    """Another worker failed; this one stops at the next block boundary."""


class Sink(Protocol):
    """Where bytes go; a sink may also offer ``copy_range(fd, offset, n, label)``."""

    capacity: int

    def reserve(self, nbytes: int) -> memoryview: ...

    def advance(self, nbytes: int) -> None: ...


class TensorStream:
    """Produces output tensor bytes into a sink, reading through one reusable buffer."""

    def __init__(self, reader: RangeReader, stop: threading.Event | None = None) -> None:
        self.reader = reader
        self.stop = stop

    def _check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Cancelled()

    def fill(self, node: Node, sink: Sink) -> None:
        """Write all of the node's bytes into ``sink``."""
        self._check_stop()
        span = node.contiguous()
        if span is not None:
            self._range(*span, sink)
            return
        if isinstance(node, CombineNode) and node.axis == 0:
            for child in node.children:
                self.fill(child, sink)
            return
        shape, itemsize = node.shape, node.itemsize
        if not shape:  # one element that is not in a file: a pad element
            fill: bytes = node.fill  # type: ignore[attr-defined]
            sink.reserve(len(fill))[:] = fill
            sink.advance(len(fill))
            return
        out_row = math.prod(shape[1:]) * itemsize
        read_row = node.read_row_bytes()
        if out_row == 0 or shape[0] == 0:
            return
        if out_row > sink.capacity or read_row > self.reader.capacity:
            for r in range(shape[0]):
                self.fill(node.row(r), sink)
            return
        per_block = min(
            sink.capacity // out_row,
            self.reader.capacity // read_row if read_row else shape[0],
        )
        for r0 in range(0, shape[0], per_block):
            self._check_stop()
            r1 = min(shape[0], r0 + per_block)
            nbytes = (r1 - r0) * out_row
            view = sink.reserve(nbytes)
            out = np.frombuffer(view, dtype=np.uint8).reshape((r1 - r0, *shape[1:], itemsize))
            node.fill_rows(r0, r1, out, self.reader.read)
            del out
            sink.advance(nbytes)

    def _range(self, rel: str, begin: int, end: int, sink: Sink) -> None:
        copy = getattr(sink, "copy_range", None) if self.reader.sources.local else None
        if copy is not None:  # the writer copies (zero-copy where it can)
            sources = self.reader.sources
            copy(sources.fd(rel), begin, end - begin, str(sources.catalog.path_of(rel)))
            self.reader.bytes_read += end - begin
            return
        pos = begin
        while pos < end:
            self._check_stop()
            n = min(sink.capacity, end - pos)
            self.reader.read_into(rel, pos, sink.reserve(n))
            sink.advance(n)
            pos += n


class BufferSink:
    """A sink that collects everything in memory (tests, small tensors)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.data = bytearray()
        self._buf = bytearray(capacity)

    def reserve(self, nbytes: int) -> memoryview:
        return memoryview(self._buf)[:nbytes]

    def advance(self, nbytes: int) -> None:
        self.data += self._buf[:nbytes]
