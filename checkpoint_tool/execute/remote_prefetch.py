"""Plan-driven prefetch for remote sources: fetch what the next tensors will read, in order.

Before an output file is streamed, the runner hands the reader its tensors' nodes
(``RangeReader.expect``). Each piece reads whole source rows over its dim-0 box, so its
footprint is one byte range; consecutive footprints closer than ``GAP`` are merged, and the
result is cut into segments of at most ``CKPT_REMOTE_SEGMENT`` bytes (default 8 MiB). Up to
``CKPT_REMOTE_AHEAD`` bytes (default 64 MiB) of segments are in flight or waiting on the
store's pool at any time; a read served from segment *k* frees every segment before it. A read
no segment covers (the plan changed shape, a row split) falls back to a direct ranged read, so
correctness never depends on this module; only the request count and the overlap do.

Bytes transferred stay the bytes read, plus the merged gaps (< ``GAP`` each). One request per
segment instead of one per tensor: DeepSeek-R1 has 92k tensors in 163 shards.

Example::

    pf = Prefetch(store, footprints([build_node(t, cat.tensors) for t in ofile.tensors]))
    pf.read_into("model-00001-of-00002.safetensors", 4096, view)   # True when served
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING

from checkpoint_tool.execute.ops import CombineNode, Node, PieceNode

if TYPE_CHECKING:
    from checkpoint_tool.catalog.remote.store import Store

#: footprints closer than this are fetched as one range (the gap is transferred, unused)
GAP = 64 << 10


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def footprints(nodes: Iterable[Node]) -> Iterator[tuple[str, int, int]]:
    """``(file, begin, end)`` of every source read of ``nodes``, in stream order."""
    for node in nodes:
        if isinstance(node, CombineNode):
            yield from footprints(node.children)
            continue
        if not isinstance(node, PieceNode) or node.file is None:
            continue
        file = node.file
        if not node.box:
            yield file, node.base, node.base + node.itemsize
            continue
        row = node.read_row_bytes()
        (b0, b1) = node.box[0]
        if b1 > b0 and row:
            yield file, node.base + b0 * row, node.base + b1 * row


def segments(spans: Iterable[tuple[str, int, int]], limit: int) -> list[tuple[str, int, int]]:
    """Merge near consecutive spans of one file, then cut into pieces of at most ``limit``."""
    merged: list[list] = []  # [file, begin, end], extended in place
    for file, b, e in spans:
        last = merged[-1] if merged else None
        if last is not None and last[0] == file and last[2] <= b <= last[2] + GAP:
            last[2] = max(last[2], e)
        elif last is not None and last[0] == file and last[1] <= b and e <= last[2]:
            continue  # already covered
        else:
            merged.append([file, b, e])
    out = []
    for file, b, e in merged:
        for s in range(b, e, limit):
            out.append((file, s, min(e, s + limit)))
    return out


class _Segment:
    __slots__ = ("begin", "buf", "end", "file", "future")

    def __init__(self, file: str, begin: int, end: int) -> None:
        self.file, self.begin, self.end = file, begin, end
        self.buf: bytearray | None = None
        self.future: Future[None] | None = None


class Prefetch:
    """The segments of one output file, fetched ahead of the reader (one reader thread)."""

    def __init__(self, store: Store, spans: Iterable[tuple[str, int, int]]) -> None:
        self.store = store
        limit = max(1 << 16, _env_int("CKPT_REMOTE_SEGMENT", 8 << 20))
        self.ahead = max(limit, _env_int("CKPT_REMOTE_AHEAD", 64 << 20))
        self._segs = [_Segment(*s) for s in segments(spans, limit)]
        self._next = 0  # first segment not yet submitted
        self._first = 0  # first segment not yet freed
        self._lock = threading.Lock()
        self._fill()

    def _fill(self) -> None:
        """Submit segments until ``ahead`` bytes are in flight or ready."""
        held = sum(s.end - s.begin for s in self._segs[self._first : self._next])
        while self._next < len(self._segs):
            seg = self._segs[self._next]
            if held and held + (seg.end - seg.begin) > self.ahead:
                break
            seg.buf = bytearray(seg.end - seg.begin)
            seg.future = self.store.submit_part(seg.file, seg.begin, memoryview(seg.buf))
            held += seg.end - seg.begin
            self._next += 1

    def read_into(self, rel: str, offset: int, view: memoryview) -> bool:
        """Serve ``view`` from prefetched segments; False (nothing copied) if they do not
        cover it."""
        end = offset + len(view)
        k = self._find(rel, offset)
        if k is None:
            return False
        pos, parts = offset, []
        while pos < end:
            if (
                k >= self._next
                or self._segs[k].file != rel
                or not (self._segs[k].begin <= pos < self._segs[k].end)
            ):
                return False
            parts.append(k)
            pos = self._segs[k].end
            k += 1
        pos = offset
        for k in parts:
            seg = self._segs[k]
            assert seg.future is not None and seg.buf is not None
            seg.future.result()  # the store's one-line error after its retries
            take = min(end, seg.end) - pos
            view[pos - offset : pos - offset + take] = seg.buf[
                pos - seg.begin : pos - seg.begin + take
            ]
            pos += take
        for seg in self._segs[self._first : parts[0]]:
            seg.buf = None  # read past: free it (its future, if any, finishes in the pool)
        self._first = max(self._first, parts[0])
        self._fill()
        return True

    def _find(self, rel: str, offset: int) -> int | None:
        for k in range(self._first, self._next):
            seg = self._segs[k]
            if seg.file == rel and seg.begin <= offset < seg.end:
                return k
        return None

    def close(self) -> None:
        for seg in self._segs[self._first : self._next]:
            if seg.future is not None:
                seg.future.cancel()
            seg.buf = None
