"""Stream the bytes of one output tensor in bounded chunks, in output order.

Three cases, chosen per node of ``execute.ops``:

1. one contiguous source byte range (a verbatim tensor, or a dim-0 region such as a TP slice of
   gate/up rows): ``pread`` it in chunks of at most ``chunk`` bytes and hand each chunk on;
2. a concat/stack along dim 0: stream each child in turn;
3. anything else (inner-dim regions, pads, concat/stack on inner dims): blocks of output rows;
   each block reads the covering source rows as one range and gathers them with one strided
   numpy copy into the output buffer. A row larger than the budget is split into its own rows.

Memory is two buffers of ``chunk`` bytes per worker (one read, one output), reused throughout.

Example::

    stream = TensorStream(reader, chunk=64 << 20)
    for view in stream.chunks(build_node(out_tensor, catalog.tensors)):
        writer.write_chunk(view)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import numpy as np

from checkpoint_tool.execute.ops import CombineNode, Node
from checkpoint_tool.execute.source import GrowingBuffer, RangeReader


class Cancelled(Exception):
    """Another worker failed; this one stops at the next chunk boundary."""


class TensorStream:
    """Produces output tensor bytes through a reader with a fixed read buffer."""

    def __init__(
        self, reader: RangeReader, chunk: int, stop: threading.Event | None = None
    ) -> None:
        self.reader = reader
        self.chunk = chunk
        self.stop = stop
        self._out = GrowingBuffer(chunk)

    def chunks(self, node: Node) -> Iterator[memoryview]:
        """Yield the node's bytes; each view is valid until the next one is requested."""
        if self.stop is not None and self.stop.is_set():
            raise Cancelled()
        span = node.contiguous()
        if span is not None:
            yield from self._range(*span)
            return
        if isinstance(node, CombineNode) and node.axis == 0:
            for child in node.children:
                yield from self.chunks(child)
            return
        shape, itemsize = node.shape, node.itemsize
        if not shape:  # one element that is not in a file: a pad element
            yield memoryview(node.fill)  # type: ignore[attr-defined]
            return
        out_row = math.prod(shape[1:]) * itemsize
        read_row = node.read_row_bytes()
        if out_row == 0 or shape[0] == 0:
            return
        if out_row > self.chunk or read_row > self.reader.capacity:
            for r in range(shape[0]):
                yield from self.chunks(node.row(r))
            return
        per_block = min(
            self.chunk // out_row, self.reader.capacity // read_row if read_row else shape[0]
        )
        for r0 in range(0, shape[0], per_block):
            if self.stop is not None and self.stop.is_set():
                raise Cancelled()
            r1 = min(shape[0], r0 + per_block)
            nbytes = (r1 - r0) * out_row
            view = self._out.view(nbytes)
            out = np.frombuffer(view, dtype=np.uint8).reshape((r1 - r0, *shape[1:], itemsize))
            node.fill_rows(r0, r1, out, self.reader.read)
            yield view

    def _range(self, rel: str, begin: int, end: int) -> Iterator[memoryview]:
        pos = begin
        while pos < end:
            if self.stop is not None and self.stop.is_set():
                raise Cancelled()
            n = min(self.reader.capacity, end - pos)
            yield self.reader.read(rel, pos, n)
            pos += n
