"""Byte-level geometry of one output tensor: plan ops (regions, pads, concat/stack) as a tree.

The executor never interprets element values: every dtype is a run of ``itemsize``-byte
elements in row-major order, in **storage** coordinates (packed FP4 ``U8``/``F4`` count bytes on
the last dim). An output tensor becomes a small tree of nodes:

- ``PieceNode``: a box ``[start, stop)`` per dim of one source tensor (the plan's regions),
  then its pads (``fill`` bytes each); without a file, a constant block (a dim-0 pad's rows).
- ``CombineNode``: children concatenated along ``axis`` or stacked on a new ``axis``.

Each node fills rows ``[r0, r1)`` of dim 0 into a caller's numpy view (one strided copy from a
read buffer), tells whether it is one contiguous byte range of a source file (then streamed
verbatim), and splits into per-row sub-nodes when one row exceeds the memory budget.

Example (rank 1 of 2 of a ``[4, 6]`` BF16 down projection, padded from 3 to 4 columns)::

    node = build_node(out_tensor, catalog.tensors)   # execute.tree
    node.shape, node.itemsize   # ((4, 4), 2)
    node.contiguous()           # None: columns 3..6 of each row, so rows are read and gathered
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.catalog.safetensors_format import storage_layout
from checkpoint_tool.errors import InputError
from checkpoint_tool.plan.model import Piece

#: reads ``nbytes`` at absolute ``offset`` of ``file`` into a reusable buffer; returns a view
ReadFn = Callable[[str, int, int], memoryview]


class Node(Protocol):
    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def itemsize(self) -> int: ...

    def contiguous(self) -> tuple[str, int, int] | None: ...

    def read_row_bytes(self) -> int: ...

    def fill_rows(self, r0: int, r1: int, out: np.ndarray, read: ReadFn) -> None: ...

    def row(self, r: int) -> Node: ...


def _fill_array(fill: bytes) -> np.ndarray:
    return np.frombuffer(fill, dtype=np.uint8)


@dataclass(frozen=True)
class PieceNode:
    """A box of one source tensor (or a constant block when ``file`` is None), then pads.

    ``base`` is the absolute offset of element ``[0, ..., 0]`` of the source (sub-)tensor of
    shape ``src_shape``; ``box`` holds ``(start, stop)`` per dim; ``pads`` holds
    ``(dim, amount, fill bytes)`` applied in order.
    """

    file: str | None
    base: int
    src_shape: tuple[int, ...]
    itemsize: int
    box: tuple[tuple[int, int], ...]
    pads: tuple[tuple[int, int, bytes], ...] = ()
    fill: bytes = b""

    @property
    def shape(self) -> tuple[int, ...]:
        dims = [stop - start for start, stop in self.box]
        for dim, amount, _ in self.pads:
            dims[dim] += amount
        return tuple(dims)

    def _src_row_bytes(self) -> int:
        return math.prod(self.src_shape[1:]) * self.itemsize

    def contiguous(self) -> tuple[str, int, int] | None:
        """``(file, begin, end)`` when the node is one contiguous source byte range."""
        if self.file is None or self.pads:
            return None
        inner_full = True  # all dims after the current one are full
        for d in range(len(self.box) - 1, -1, -1):
            start, stop = self.box[d]
            if not inner_full and stop - start > 1:
                return None
            if (start, stop) != (0, self.src_shape[d]):
                inner_full = False
        strides = byte_strides(self.src_shape, self.itemsize)
        begin = self.base + sum(start * s for (start, _), s in zip(self.box, strides, strict=True))
        return self.file, begin, begin + math.prod(self.shape) * self.itemsize

    def read_row_bytes(self) -> int:
        return 0 if self.file is None else self._src_row_bytes()

    def fill_rows(self, r0: int, r1: int, out: np.ndarray, read: ReadFn) -> None:
        """Write rows ``[r0, r1)`` of this node into ``out`` (shape ``(r1-r0, *shape[1:], it)``)."""
        stage = [stop - start for start, stop in self.box]
        n_box = max(0, min(r1, stage[0]) - r0)
        if n_box:
            inner = tuple(slice(0, stage[d]) for d in range(1, len(stage)))
            target = out[(slice(0, n_box), *inner)]
            if self.file is None:
                target[...] = _fill_array(self.fill)
            else:
                start0 = self.box[0][0] + r0
                row_bytes = self._src_row_bytes()
                raw = read(self.file, self.base + start0 * row_bytes, n_box * row_bytes)
                src = np.frombuffer(raw, dtype=np.uint8).reshape(
                    (n_box, *self.src_shape[1:], self.itemsize)
                )
                src_box = tuple(slice(a, b) for a, b in self.box[1:])
                target[...] = src[(slice(None), *src_box)]
        for dim, amount, fill in self.pads:
            if dim == 0:
                lo, hi = max(r0, stage[0]), min(r1, stage[0] + amount)
                rows = slice(lo - r0, hi - r0) if hi > lo else slice(0, 0)
                region = (rows, *(slice(0, stage[d]) for d in range(1, len(stage))))
            else:
                rows = slice(0, max(0, min(r1, stage[0]) - r0))
                region = tuple(
                    rows
                    if d == 0
                    else slice(stage[d], stage[d] + amount)
                    if d == dim
                    else slice(0, stage[d])
                    for d in range(len(stage))
                )
            out[region] = _fill_array(fill)
            stage[dim] += amount

    def row(self, r: int) -> Node:
        """Row ``r`` as a node of rank - 1 (used when one row exceeds the memory budget)."""
        inner_pads = tuple((d - 1, a, f) for d, a, f in self.pads if d != 0)
        box_rows = self.box[0][1] - self.box[0][0]
        if r < box_rows:
            if self.file is None:
                return PieceNode(None, 0, self.src_shape[1:], self.itemsize, self.box[1:],
                                 inner_pads, self.fill)  # fmt: skip
            row_bytes = self._src_row_bytes()
            return PieceNode(
                self.file,
                self.base + (self.box[0][0] + r) * row_bytes,
                self.src_shape[1:],
                self.itemsize,
                self.box[1:],
                inner_pads,
            )
        stage = [stop - start for start, stop in self.box]
        for i, (dim, amount, fill) in enumerate(self.pads):
            if dim == 0 and stage[0] <= r < stage[0] + amount:
                later = tuple((d - 1, a, f) for d, a, f in self.pads[i + 1 :] if d != 0)
                inner = tuple(stage[1:])
                return PieceNode(None, 0, inner, self.itemsize, tuple((0, n) for n in inner),
                                 later, fill)  # fmt: skip
            stage[dim] += amount
        raise IndexError(r)


@dataclass(frozen=True)
class CombineNode:
    """Children concatenated along ``axis`` (``concat``) or stacked on a new ``axis``."""

    children: tuple[Node, ...]
    kind: str  # "concat" | "stack"
    axis: int

    @property
    def itemsize(self) -> int:
        return self.children[0].itemsize

    @property
    def shape(self) -> tuple[int, ...]:
        first = list(self.children[0].shape)
        if self.kind == "stack":
            return (*first[: self.axis], len(self.children), *first[self.axis :])
        first[self.axis] = sum(c.shape[self.axis] for c in self.children)
        return tuple(first)

    def contiguous(self) -> tuple[str, int, int] | None:
        return None

    def read_row_bytes(self) -> int:
        return max(c.read_row_bytes() for c in self.children)

    def _row_spans(self) -> list[tuple[Node, int, int]]:
        """For axis 0: (child, first output row, row count) of each child."""
        spans, pos = [], 0
        for c in self.children:
            n = 1 if self.kind == "stack" else c.shape[0]
            spans.append((c, pos, n))
            pos += n
        return spans

    def fill_rows(self, r0: int, r1: int, out: np.ndarray, read: ReadFn) -> None:
        if self.axis == 0:
            for child, pos, n in self._row_spans():
                lo, hi = max(r0, pos), min(r1, pos + n)
                if hi <= lo:
                    continue
                dst = out[lo - r0 : hi - r0]
                if self.kind == "stack" and not child.shape:
                    file, begin, end = child.contiguous() or ("", 0, 0)
                    dst[0][...] = np.frombuffer(read(file, begin, end - begin), dtype=np.uint8)
                elif self.kind == "stack":
                    child.fill_rows(0, child.shape[0], dst[0], read)
                else:
                    child.fill_rows(lo - pos, hi - pos, dst, read)
            return
        pos = 0
        for child in self.children:
            if self.kind == "stack":
                index = (slice(None),) * self.axis + (pos,)
                pos += 1
            else:
                width = child.shape[self.axis]
                index = (slice(None),) * self.axis + (slice(pos, pos + width),)
                pos += width
            child.fill_rows(r0, r1, out[index], read)

    def row(self, r: int) -> Node:
        if self.axis == 0:
            for child, pos, n in self._row_spans():
                if pos <= r < pos + n:
                    return child if self.kind == "stack" else child.row(r - pos)
            raise IndexError(r)
        return CombineNode(tuple(c.row(r) for c in self.children), self.kind, self.axis - 1)


def byte_strides(shape: tuple[int, ...], itemsize: int) -> list[int]:
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def piece_node(piece: Piece, entry: TensorEntry, tensor: str) -> PieceNode:
    """Compose a plan ``Piece``'s regions into a box over its source tensor and attach pads."""
    shape, itemsize = storage_layout(entry.dtype, entry.shape)
    box = [(0, n) for n in shape]
    for region in piece.slices:
        dim = _axis(region.dim, len(shape), tensor, entry.name)
        start, stop = box[dim]
        if not 0 <= region.start <= region.stop <= stop - start:
            raise InputError(
                f"{tensor}: region [{region.start}, {region.stop}) on dim {region.dim} is outside "
                f"source {entry.name!r} ({stop - start} there); the plan is inconsistent, re-plan"
            )
        box[dim] = (start + region.start, start + region.stop)
    pads = []
    for pad in piece.pads:
        dim = _axis(pad.dim, len(shape), tensor, entry.name)
        fill = bytes.fromhex(pad.fill)
        if len(fill) != itemsize or pad.amount < 0:
            raise InputError(
                f"{tensor}: pad fill {pad.fill!r} x{pad.amount} does not fit {entry.dtype} "
                f"({itemsize}-byte elements) of {entry.name!r}; the plan is inconsistent, re-plan"
            )
        pads.append((dim, pad.amount, fill))
    return PieceNode(entry.file, entry.begin, shape, itemsize, tuple(box), tuple(pads))


def _axis(dim: int, rank: int, tensor: str, source: str) -> int:
    axis = dim + rank if dim < 0 else dim
    if not 0 <= axis < rank:
        raise InputError(
            f"{tensor}: dim {dim} does not exist on source {source!r} (rank {rank}); "
            "the plan is inconsistent, re-plan"
        )
    return axis
