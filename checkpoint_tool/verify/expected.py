"""The bytes a planned output tensor must hold, rebuilt from the source, a block of rows at a time.

Written apart from the executor on purpose (a second implementation of the plan's semantics,
so a bug in the executor's byte mover cannot hide itself; for the same reason it does not ask
``checkpoint_tool.formats``, whose regions and pads the plan already holds): each ``Piece`` is its source tensor
cut by its regions (composed, storage coordinates), then padded in order (each pad element the
pad's ``fill`` bytes); ``concat`` joins pieces along ``axis``, ``stack`` adds a new dim.

Arrays are raw bytes: ``uint8`` of shape ``(*storage_shape, itemsize)`` (packed FP4 counts bytes
on its last dim). ``segments(tensor, ...)`` splits an output tensor into contiguous byte ranges
of bounded size, each with a function that builds its expected bytes, and a twin that builds
*labels* (which piece, source or padding, every element comes from) for mismatch reports.

Where the expected bytes are plain byte ranges of source tensors and fills (a renamed tensor,
experts stacked or concatenated on dim 0, padding rows), the segment also lists them as
``runs``, so a checker can compare file ranges directly, a cache-sized chunk at a time, without
building the array.

Example (an MXFP4 scale padded from 4 to 8 rows, fill 7f)::

    for seg in segments(out_tensor, read_source, budget=1 << 20):
        seg.start, seg.stop      # byte range inside the output tensor: (0, 32)
        seg.expected()           # uint8 [8, 4, 1]: rows 0-3 from the source, rows 4-7 = 0x7f
        seg.runs                 # (Run(16, source='...weight_scale', offset=0),
                                 #  Run(16, fill=b'\x7f'))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from checkpoint_tool.catalog.safetensors_format import DTYPE_BITS
from checkpoint_tool.errors import InputError
from checkpoint_tool.plan.model import OutputTensor, Piece

#: reads rows ``[r0, r1)`` (dim 0) of a source tensor: uint8 ``(r1 - r0, *shape[1:], itemsize)``
RowReader = Callable[[str, int, int], np.ndarray]
#: source tensor name -> (header dtype, header shape)
HeaderLookup = Callable[[str], tuple[str, tuple[int, ...]]]

#: label codes: piece k's source elements are 2k, its padding 2k + 1
LABEL_DTYPE = np.int32


def storage_geometry(dtype: str, shape: Sequence[int]) -> tuple[tuple[int, ...], int]:
    """Storage shape and bytes per storage element: ``F4 [8, 64]`` -> ``((8, 32), 1)``."""
    if dtype not in DTYPE_BITS:
        raise InputError(f"dtype {dtype} is not a safetensors dtype ckpt knows")
    bits = DTYPE_BITS[dtype]
    shape = tuple(int(s) for s in shape)
    if bits % 8 == 0:
        return shape, bits // 8
    if not shape:
        return (1,), 1
    return (*shape[:-1], (shape[-1] * bits + 7) // 8), 1


@dataclass(frozen=True)
class PieceGeometry:
    """A piece resolved against its source header: the box cut out of it and its pads."""

    index: int
    piece: Piece
    src_shape: tuple[int, ...]
    itemsize: int
    box: tuple[tuple[int, int], ...]
    pads: tuple[tuple[int, int, bytes], ...]

    @property
    def shape(self) -> tuple[int, ...]:
        dims = [b - a for a, b in self.box]
        for dim, amount, _ in self.pads:
            dims[dim] += amount
        return tuple(dims)

    @property
    def padded(self) -> bool:
        return any(amount for _, amount, _ in self.pads)

    def row_bytes(self) -> int:
        """Bytes of one source row read for one output row (whole source rows are read)."""
        return math.prod(self.src_shape[1:]) * self.itemsize

    @property
    def contiguous(self) -> bool:
        """Output rows are whole source rows then dim-0 padding: byte ranges (``piece_runs``)."""
        if not self.src_shape:
            return False
        inner_whole = all(
            (a, b) == (0, n) for (a, b), n in zip(self.box[1:], self.src_shape[1:], strict=True)
        )
        return inner_whole and all(dim == 0 for dim, _, _ in self.pads)

    def describe_pad(self, k: int) -> str:
        dim, amount, fill = self.pads[k]
        return f"pad dim {dim} +{amount} fill {fill.hex()}"


def source_key(piece: Piece) -> str:
    """The name verify reads a piece's source by: the source, or for a requantized piece
    ``<source>@<scheme>`` (``verify.requant`` serves those), e.g. ``"m.weight@mxfp4"``."""
    return piece.source if piece.requant is None else f"{piece.source}@{piece.requant}"


def resolve_piece(
    index: int, piece: Piece, lookup: HeaderLookup, out_itemsize: int
) -> PieceGeometry:
    """Compose the piece's regions into one box and normalize its pads (InputError if bad)."""
    dtype, shape = lookup(source_key(piece))
    src_shape, itemsize = storage_geometry(dtype, shape)
    if not shape:  # 0-d: one element, kept as shape (1,) internally, like storage_geometry
        src_shape = ()
    if itemsize != out_itemsize:
        raise InputError(
            f"plan piece {piece.source!r}: element size {itemsize} differs from the output's "
            f"{out_itemsize}; the plan does not fit the source, re-plan"
        )
    ndim = len(src_shape)
    box = [(0, n) for n in src_shape]
    for region in piece.slices:
        d = region.dim % ndim if ndim else 0
        start, stop = box[d]
        if not 0 <= region.start <= region.stop <= stop - start:
            raise InputError(
                f"plan piece {piece.source!r}: region [{region.start}, {region.stop}) on dim "
                f"{region.dim} exceeds the source extent {stop - start}; re-plan"
            )
        box[d] = (start + region.start, start + region.stop)
    pads = []
    for pad in piece.pads:
        fill = bytes.fromhex(pad.fill)
        if len(fill) != itemsize:
            raise InputError(
                f"plan piece {piece.source!r}: pad fill {pad.fill!r} is not {itemsize} byte(s)"
            )
        pads.append((pad.dim % ndim if ndim else 0, pad.amount, fill))
    return PieceGeometry(index, piece, src_shape, itemsize, tuple(box), tuple(pads))


def piece_rows(
    g: PieceGeometry,
    r0: int,
    r1: int,
    read: RowReader,
    *,
    labels: bool = False,
) -> np.ndarray:
    """Rows ``[r0, r1)`` (dim 0 of the piece's final shape) of the piece.

    Bytes: uint8 ``(r1 - r0, *shape[1:], itemsize)``; with ``labels``: int32
    ``(r1 - r0, *shape[1:], 1)`` holding ``2 * index`` (source) or ``2 * index + 1`` (pad).
    """
    if not g.src_shape:  # 0-d source: the single element
        if labels:
            return np.full((1,), 2 * g.index, dtype=LABEL_DTYPE)
        return read(source_key(g.piece), 0, 1).reshape(g.itemsize)
    depth = 1 if labels else g.itemsize
    (b0, b1), inner = g.box[0], g.box[1:]
    n_src = b1 - b0
    lo, hi = min(max(r0, 0), n_src), min(r1, n_src)
    if labels:
        block = np.full((hi - lo, *(b - a for a, b in inner), 1), 2 * g.index, dtype=LABEL_DTYPE)
    else:
        raw = read(source_key(g.piece), b0 + lo, b0 + hi) if hi > lo else _empty(g, hi - lo)
        block = raw[(slice(None), *(slice(a, b) for a, b in inner))]
    rows = n_src
    for dim, amount, fill in g.pads:
        if dim == 0:
            add = max(0, min(r1, rows + amount) - max(r0, rows))
            rows += amount
            if add:
                shape = (add, *block.shape[1:-1], depth)
                block = np.concatenate([block, _fill(shape, fill, labels, 2 * g.index + 1)])
        else:
            shape = list(block.shape)
            shape[dim] = amount
            block = np.concatenate(
                [block, _fill(tuple(shape), fill, labels, 2 * g.index + 1)], axis=dim
            )
    return block


@dataclass(frozen=True)
class Run:
    """``length`` expected bytes: source tensor ``source``'s bytes from ``offset`` (inside the
    tensor), or, when ``source`` is None, ``fill`` repeated."""

    length: int
    source: str | None = None
    offset: int = 0
    fill: bytes = b""


def piece_runs(g: PieceGeometry, r0: int, r1: int) -> list[Run]:
    """Rows ``[r0, r1)`` of a ``contiguous`` piece as byte runs (source rows, then pad rows)."""
    row = g.row_bytes()
    b0, n_src = g.box[0][0], g.box[0][1] - g.box[0][0]
    lo, hi = min(max(r0, 0), n_src), min(r1, n_src)
    out = [Run((hi - lo) * row, source_key(g.piece), (b0 + lo) * row)] if hi > lo else []
    rows = n_src
    for _, amount, fill in g.pads:  # all on dim 0 (``contiguous``)
        add = max(0, min(r1, rows + amount) - max(r0, rows))
        rows += amount
        if add:
            out.append(Run(add * row, fill=fill))
    return out


def _empty(g: PieceGeometry, n: int) -> np.ndarray:
    return np.empty((n, *g.src_shape[1:], g.itemsize), dtype=np.uint8)


def _fill(shape: tuple[int, ...], fill: bytes, labels: bool, code: int) -> np.ndarray:
    if labels:
        return np.full(shape, code, dtype=LABEL_DTYPE)
    return np.broadcast_to(np.frombuffer(fill, dtype=np.uint8), shape)


@dataclass(frozen=True)
class Segment:
    """Bytes ``[start, stop)`` of an output tensor and how to build what they must be."""

    start: int
    stop: int
    shape: tuple[int, ...]  # storage shape of the segment's elements (without itemsize)
    build: Callable[[bool], np.ndarray]
    #: the expected bytes as source byte ranges and fills, when they are that simple
    runs: tuple[Run, ...] | None = None

    def expected(self) -> np.ndarray:
        return self.build(False)

    def labels(self) -> np.ndarray:
        return self.build(True)


class TensorLayout:
    """An output tensor resolved against the source headers: pieces, shapes, segments.

    A tensor without pieces is a constant (``OutputTensor.fill``); a ``stack`` on axis 0 writes
    its pieces back to back (its header shape may regroup them, e.g. ``2E x [I, H]`` as
    ``[E, 2I, H]``); a ``single`` piece may differ from the header by size-1 dims.
    """

    def __init__(self, tensor: OutputTensor, lookup: HeaderLookup) -> None:
        self.tensor = tensor
        self.shape, self.itemsize = storage_geometry(tensor.dtype, tensor.shape)
        if not tensor.shape:
            self.shape = ()
        self.pieces = [
            resolve_piece(i, p, lookup, self.itemsize) for i, p in enumerate(tensor.pieces)
        ]
        self.fill: bytes | None = None
        if not self.pieces:
            self.fill = bytes.fromhex(tensor.fill or "")
            if len(self.fill) != self.itemsize:
                raise InputError(
                    f"plan tensor {tensor.name!r}: no pieces and fill {tensor.fill!r} is not "
                    f"{self.itemsize} byte(s); re-plan"
                )
            return
        self._check_shape()

    @property
    def padded(self) -> bool:
        return any(g.padded for g in self.pieces)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    def _back_to_back(self) -> bool:
        """Pieces written whole one after the other (one piece, or a stack on axis 0)."""
        t = self.tensor
        return t.combine == "single" or (t.combine == "stack" and t.axis == 0)

    def _combined_shape(self) -> tuple[int, ...]:
        shapes = [g.shape for g in self.pieces]
        t = self.tensor
        if t.combine == "stack":
            axis = t.axis % (len(shapes[0]) + 1)
            return (*shapes[0][:axis], len(shapes), *shapes[0][axis:])
        if t.combine == "single" or len(shapes) == 1:
            return shapes[0]
        axis = t.axis % len(shapes[0])
        return (*shapes[0][:axis], sum(s[axis] for s in shapes), *shapes[0][axis + 1 :])

    def _check_shape(self) -> None:
        got = self._combined_shape()
        if self.tensor.combine == "single":  # size-1 dims may differ: [1, I, H] -> [I, H]
            same = [n for n in got if n != 1] == [n for n in self.shape if n != 1]
            same = same and math.prod(got) == math.prod(self.shape)
        elif self._back_to_back():
            same = math.prod(got) == math.prod(self.shape)
        else:
            same = got == self.shape
        if not same:
            raise InputError(
                f"plan tensor {self.tensor.name!r}: pieces give storage shape {list(got)}, the "
                f"plan says {list(self.shape)}; re-plan"
            )

    def origin(self, label: int) -> str:
        """Human description of a label code."""
        if self.fill is not None:
            return f"constant fill {self.fill.hex()}"
        g = self.pieces[label // 2]
        if label % 2 == 0:
            box = ", ".join(f"{a}:{b}" for a, b in g.box)
            return f"source {g.piece.source} [{box}]"
        pads = "; ".join(g.describe_pad(k) for k in range(len(g.pads)))
        return f"padding of {g.piece.source} ({pads})"

    def segments(self, read: RowReader, budget: int) -> Iterator[Segment]:
        """Contiguous byte ranges of at most ~``budget`` bytes (one row at least)."""
        if self.fill is not None:
            yield from self._fill_segments(self.fill, budget)
            return
        if not self.shape:
            first = self.pieces[0]
            yield Segment(
                0, self.itemsize, (), lambda lab: piece_rows(first, 0, 1, read, labels=lab)
            )
            return
        if self._back_to_back():
            base = 0
            for g in self.pieces:
                build = self._piece_builder(g, read)
                if not g.shape:
                    yield Segment(base, base + self.itemsize, (), lambda lab, b=build: b(0, 1, lab))
                else:
                    runs = partial(piece_runs, g) if g.contiguous else None
                    yield from self._row_segments(g.shape, base, budget, g.row_bytes(), build, runs)
                base += math.prod(g.shape) * self.itemsize
            return
        src_row = max(g.row_bytes() for g in self.pieces)
        yield from self._row_segments(
            self.shape, 0, budget, src_row, self._rows_builder(read), self._rows_runs()
        )

    def _fill_segments(self, fill: bytes, budget: int) -> Iterator[Segment]:
        count = math.prod(self.shape)
        step = max(1, budget // self.itemsize)
        for e0 in range(0, count, step):
            n = min(count, e0 + step) - e0

            def build(lab: bool, n: int = n) -> np.ndarray:
                if lab:
                    return np.zeros((n, 1), dtype=LABEL_DTYPE)
                return np.broadcast_to(np.frombuffer(fill, dtype=np.uint8), (n, self.itemsize))

            nbytes = n * self.itemsize
            yield Segment(e0 * self.itemsize, e0 * self.itemsize + nbytes, (n,), build,
                          (Run(nbytes, fill=fill),))  # fmt: skip

    def _row_segments(
        self,
        shape: tuple[int, ...],
        base: int,
        budget: int,
        src_row_bytes: int,
        builder: Callable[[int, int, bool], np.ndarray],
        runs: Callable[[int, int], list[Run]] | None = None,
    ) -> Iterator[Segment]:
        row = math.prod(shape[1:]) * self.itemsize
        step = max(1, budget // max(1, row, src_row_bytes))
        for r0 in range(0, shape[0], step):
            r1 = min(shape[0], r0 + step)
            yield Segment(
                base + r0 * row,
                base + r1 * row,
                (r1 - r0, *shape[1:]),
                lambda lab, r0=r0, r1=r1: builder(r0, r1, lab),
                None if runs is None else tuple(runs(r0, r1)),
            )

    @staticmethod
    def _piece_builder(g: PieceGeometry, read: RowReader) -> Callable[[int, int, bool], np.ndarray]:
        return lambda r0, r1, lab: piece_rows(g, r0, r1, read, labels=lab)

    def _rows_runs(self) -> Callable[[int, int], list[Run]] | None:
        """Byte runs of rows ``[r0, r1)`` of a concat on dim 0 of contiguous pieces (else None)."""
        t, pieces = self.tensor, self.pieces
        if t.combine != "concat" or t.axis % len(self.shape) or len(pieces) < 2:
            return None
        if not all(g.contiguous for g in pieces):
            return None

        def runs(r0: int, r1: int) -> list[Run]:
            out, offset = [], 0
            for g in pieces:  # each piece owns a run of rows, as in ``_rows_builder``
                n = g.shape[0]
                lo, hi = max(r0, offset), min(r1, offset + n)
                if hi > lo:
                    out += piece_runs(g, lo - offset, hi - offset)
                offset += n
            return out

        return runs

    def _rows_builder(self, read: RowReader) -> Callable[[int, int, bool], np.ndarray]:
        t = self.tensor
        pieces = self.pieces
        ndim = len(self.shape)

        def build(r0: int, r1: int, lab: bool) -> np.ndarray:
            if t.combine == "stack":  # new axis > 0: every piece contributes rows r0..r1
                parts = [piece_rows(g, r0, r1, read, labels=lab) for g in pieces]
                return np.stack(parts, axis=t.axis % ndim)
            if t.combine == "single" or len(pieces) == 1:
                return piece_rows(pieces[0], r0, r1, read, labels=lab)
            axis = t.axis % ndim
            if axis:
                parts = [piece_rows(g, r0, r1, read, labels=lab) for g in pieces]
                return np.concatenate(parts, axis=axis)
            parts, offset = [], 0
            for g in pieces:  # concat on dim 0: each piece owns a run of rows
                n = g.shape[0]
                lo, hi = max(r0, offset), min(r1, offset + n)
                if hi > lo:
                    parts.append(piece_rows(g, lo - offset, hi - offset, read, labels=lab))
                offset += n
            return np.concatenate(parts, axis=0)

        return build
