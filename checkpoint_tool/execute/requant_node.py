"""The executor's side of a requantized piece: a piece with ``requant="mxfp4"`` and source
``<module>.weight`` / ``<module>.weight_scale`` is the MXFP4 codes / E8M0 scales of the
module's source weight, dequantized (``quant.requant.source``) and quantized
(``quant.requant.mxfp4``). ``read_name`` is the source tensor such a piece reads (the
module's weight), for the executor's bookkeeping of which shards a file reads.

``requant_node`` gives an ``execute.ops`` node: the module is requantized when the stream first
asks for its rows (reading the source through the stream's reader, a block of rows at a time),
then its regions and pads are those of any piece. FSE chunks and TP slices of one module land
in several output tensors (weight and scale, each rank's file): a ``RequantCache``, one per run
of one source, keeps the MXFP4 bytes of recent modules keyed by the source tensors' byte ranges,
so a module is read and quantized once while its bytes fit the cache (the run's share of
``--memory-budget``). Memory: one module's float32 weight while it is quantized, plus the cache.
Deterministic: the same source bytes give the same output bytes on any machine.

Example::

    cache = RequantCache(max_bytes=256 << 20)
    node = requant_node(Piece("model.layers.1.mlp.shared_experts.down_proj.weight",
                              requant="mxfp4"),
                        catalog.tensors, "model.layers.1.mlp.experts.4.down_proj.weight", cache)
    node.shape, node.itemsize   # ((64, 64), 1): U8 [H, I/2]
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.errors import InputError
from checkpoint_tool.execute.ops import Node, PieceNode, ReadFn, piece_node
from checkpoint_tool.plan.model import Piece
from checkpoint_tool.quant.requant.scheme import GROUP, REQUANT, SCALE_SUFFIXES
from checkpoint_tool.quant.resolve import split_tensor_name

#: a module's requantized bytes: (packed E2M1 codes, E8M0 scales)
Quantized = tuple[np.ndarray, np.ndarray]
#: where a module's source lives: (file, begin, end) of its weight and of its scale (or None)
SourceKey = tuple[tuple[str, int, int], tuple[str, int, int] | None]


class RequantCache:
    """The requantized modules of one run, least recently used first, within ``max_bytes``
    (the last module is always kept); one thread quantizes a module while the others asking
    for it wait. Keys are byte ranges of the run's one source: never share a cache between
    sources."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[SourceKey, Quantized] = OrderedDict()
        self.busy: dict[SourceKey, threading.Event] = {}
        self.lock = threading.Lock()
        self.computed = 0  # modules quantized (a figure for tests and benchmarks)

    def get(self, key: SourceKey, compute: Callable[[], Quantized]) -> Quantized:
        while True:
            with self.lock:
                hit = self.entries.get(key)
                if hit is not None:
                    self.entries.move_to_end(key)
                    return hit
                wait = self.busy.get(key)
                if wait is None:
                    mine = self.busy[key] = threading.Event()
                    break
            wait.wait()
        try:
            value = compute()
            with self.lock:
                self.computed += 1
                self.entries[key] = value
                total = sum(a.nbytes + b.nbytes for a, b in self.entries.values())
                while len(self.entries) > 1 and total > self.max_bytes:
                    _, (a, b) = self.entries.popitem(last=False)
                    total -= a.nbytes + b.nbytes
            return value
        finally:
            with self.lock:
                del self.busy[key]
            mine.set()


def read_name(piece: Piece) -> str:
    """The source tensor ``piece`` reads: its source, or a requantized piece's module weight.
    Example: ``read_name(Piece("m.weight_scale", requant="mxfp4"))`` -> ``"m.weight"``."""
    if piece.requant is None:
        return piece.source
    return split_tensor_name(piece.source)[0] + ".weight"


def requant_node(
    piece: Piece, sources: Mapping[str, TensorEntry], tensor: str, cache: RequantCache
) -> RequantNode:
    """The node of one requantized piece of output ``tensor`` (see the module doc)."""
    base = piece.source
    module, part = split_tensor_name(base)
    if piece.requant != REQUANT:
        raise InputError(
            f"{tensor}: source {base!r} is to be requantized to {piece.requant!r}; this ckpt "
            f"requantizes to {REQUANT!r} only: re-plan"
        )
    weight = sources.get(f"{module}.weight")
    if weight is None or part not in ("weight", "weight_scale"):
        raise InputError(
            f"{tensor}: requantized source {piece.source!r} names no weight of the source "
            "checkpoint; the plan was built for another source, re-plan"
        )
    if len(weight.shape) != 2 or weight.shape[1] % GROUP:
        raise InputError(
            f"{tensor}: source {weight.name!r} has shape {list(weight.shape)}; MXFP4 needs a 2-D "
            f"weight whose input dim is a multiple of {GROUP}; re-plan"
        )
    scale = next(
        (sources[f"{module}.{s}"] for s in SCALE_SUFFIXES if f"{module}.{s}" in sources), None
    )
    n, k = weight.shape
    cols = k // 2 if part == "weight" else k // GROUP
    key = (weight.file, weight.begin, part)
    virtual = TensorEntry(base, f"\0requant:{key}", "U8", (n, cols), 0, n * cols)
    inner = piece_node(Piece(base, piece.slices, piece.pads), virtual, tensor)
    return RequantNode(inner, weight, scale, part, cache)


@dataclass(frozen=True)
class RequantNode:
    """A ``PieceNode`` over the in-memory requantized tensor (``inner.file`` is its key)."""

    inner: PieceNode
    weight: TensorEntry
    scale: TensorEntry | None
    part: str
    cache: RequantCache = field(compare=False, repr=False)
    #: this node's bytes once computed (the stream asks for them a block of rows at a time)
    memo: list = field(default_factory=list, compare=False, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.inner.shape

    @property
    def itemsize(self) -> int:
        return 1

    def contiguous(self) -> tuple[str, int, int] | None:
        return None

    def read_row_bytes(self) -> int:
        """Source bytes read per output row: a weight row (and a scale row) at a time."""
        rows = [self.weight.nbytes // max(1, self.weight.shape[0])]
        if self.scale is not None and self.scale.shape:
            rows.append(self.scale.nbytes // max(1, self.scale.shape[0]))
        return max(rows)

    def fill_rows(self, r0: int, r1: int, out: np.ndarray, read: ReadFn) -> None:
        data = self._data(read, max(1, r1 - r0) * self.read_row_bytes())
        self.inner.fill_rows(r0, r1, out, _memory_read(data))
        if r1 >= self.shape[0]:
            self.memo.clear()  # the last rows: the stream is done with this tensor

    def row(self, r: int) -> RequantRow:
        return RequantRow(self, self.inner.row(r))

    def _data(self, read: ReadFn, chunk: int) -> bytes | memoryview:
        if not self.memo:
            self.memo.append(self._compute(read, chunk))
        return self.memo[0]

    def _compute(self, read: ReadFn, chunk: int) -> memoryview:
        def quantize() -> Quantized:
            raw_w = _read_whole(self.weight, read, chunk)
            raw_s = _read_whole(self.scale, read, chunk) if self.scale is not None else b""
            return _quantize(self.weight, self.scale, raw_w, raw_s)

        w, s = self.weight, self.scale
        key = ((w.file, w.begin, w.end), None if s is None else (s.file, s.begin, s.end))
        packed, scales = self.cache.get(key, quantize)
        arr = packed if self.part == "weight" else scales
        return np.ascontiguousarray(arr).data.cast("B")


@dataclass(frozen=True)
class RequantRow:
    """Row ``r`` of a requantized node (the stream splits rows above its buffer)."""

    parent: RequantNode
    inner: Node

    @property
    def shape(self) -> tuple[int, ...]:
        return self.inner.shape

    @property
    def itemsize(self) -> int:
        return 1

    def contiguous(self) -> tuple[str, int, int] | None:
        return None

    def read_row_bytes(self) -> int:
        return 0

    def fill_rows(self, r0: int, r1: int, out: np.ndarray, read: ReadFn) -> None:
        data = self.parent._data(read, self.parent.read_row_bytes())
        self.inner.fill_rows(r0, r1, out, _memory_read(data))

    def row(self, r: int) -> RequantRow:
        return RequantRow(self.parent, self.inner.row(r))


def _memory_read(data: bytes | memoryview) -> ReadFn:
    view = memoryview(data)

    def read(_file: str, offset: int, nbytes: int) -> memoryview:
        return view[offset : offset + nbytes]

    return read


def _read_whole(entry: TensorEntry, read: ReadFn, chunk: int) -> bytes:
    """All bytes of ``entry`` through the stream's reader, ``chunk`` bytes (whole rows) a time."""
    row = entry.nbytes // max(1, entry.shape[0]) if entry.shape else entry.nbytes
    step = max(row, (chunk // max(1, row)) * row)
    out = bytearray(entry.nbytes)
    for pos in range(0, entry.nbytes, step):
        n = min(step, entry.nbytes - pos)
        out[pos : pos + n] = read(entry.file, entry.begin + pos, n)
    return bytes(out)


def _quantize(
    weight: TensorEntry, scale: TensorEntry | None, raw_w: bytes, raw_s: bytes
) -> tuple[np.ndarray, np.ndarray]:
    import torch

    from checkpoint_tool.catalog.reader import bytes_to_tensor
    from checkpoint_tool.quant.requant.mxfp4 import quantize_mxfp4
    from checkpoint_tool.quant.requant.source import dequantize_source

    parts = {"weight": bytes_to_tensor(raw_w, weight.dtype, weight.shape)}
    if scale is not None:
        parts["scale"] = bytes_to_tensor(raw_s, scale.dtype, scale.shape)
    try:  # BF16 goes to the quantizer as it is (its integer path); others as float32
        bf16 = parts["weight"].dtype == torch.bfloat16 and parts["weight"].ndim == 2
        w = parts["weight"] if bf16 else dequantize_source(parts)
    except InputError as exc:
        raise InputError(f"{weight.name}: {exc.message}") from None
    packed, scales = quantize_mxfp4(w, name=weight.name)
    return packed.numpy(), scales.numpy()
