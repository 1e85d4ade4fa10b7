"""``narrow``: a rank's range of a planned tensor equals narrowing the tensor the plan describes.

Reference: the full planned tensor is built from a random source with the codecs' tensor ops
(``apply_region`` / ``apply_pad``, ``torch.cat``) and narrowed with ``torch.narrow``; the
narrowed pieces are built the same way from the same source; both must be byte-identical.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.plan.layouts.narrow import narrow, pieces_shape
from checkpoint_tool.plan.model import OutputTensor, Pad, Piece, Region
from checkpoint_tool.quant.codecs import apply_pad, apply_region


def build(piece: Piece, source: torch.Tensor) -> torch.Tensor:
    t = source
    for r in piece.slices:
        t = apply_region(t, r)
    for p in piece.pads:
        t = apply_pad(t, p)
    return t


def entry(name: str, t: torch.Tensor) -> TensorEntry:
    return TensorEntry(name=name, file="x", dtype="U8", shape=tuple(t.shape), begin=0, end=0)


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    rows, cols = draw(st.integers(2, 9)), draw(st.integers(2, 9))
    dim = draw(st.sampled_from([0, 1]))
    size = (rows, cols)[dim]
    a = draw(st.integers(0, size - 1))
    b = draw(st.integers(a, size))
    slices = [Region(dim=dim, start=a, stop=b)] if draw(st.booleans()) else []
    pads = []
    for _ in range(draw(st.integers(0, 3))):
        pads.append(Pad(dim=draw(st.sampled_from([0, 1])), amount=draw(st.integers(0, 4)),
                        fill=draw(st.sampled_from(["00", "7f", "38"]))))  # fmt: skip
    seed = draw(st.integers(0, 2**16))
    return rows, cols, slices, pads, seed, draw(st.sampled_from([0, 1])), draw(st.data())


@settings(max_examples=150, deadline=None)
@given(cases())
def test_narrowing_a_piece_equals_narrowing_its_tensor(case):
    rows, cols, slices, pads, seed, ndim, data = case
    g = torch.Generator().manual_seed(seed)
    source = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, generator=g)
    piece = Piece(source="s", slices=slices, pads=pads)
    full = build(piece, source)
    n = full.shape[ndim]
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    tensor = OutputTensor(name="t", dtype="U8", shape=list(full.shape), pieces=[piece])
    (got,) = narrow(tensor, {"s": entry("s", source)}, ndim, start, stop)
    assert torch.equal(build(got, source), full.narrow(ndim, start, stop - start))


def test_narrowing_a_concat_keeps_the_pieces_it_overlaps():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 256, (5, 4), dtype=torch.uint8, generator=g)
    b = torch.randint(0, 256, (3, 4), dtype=torch.uint8, generator=g)
    pa = Piece(source="a", pads=[Pad(dim=0, amount=3, fill="00")])  # 8 rows
    pb = Piece(source="b", slices=[Region(dim=0, start=1, stop=3)], pads=[Pad(dim=0, amount=6)])
    tensor = OutputTensor(name="t", dtype="U8", shape=[16, 4], pieces=[pa, pb], combine="concat")
    entries = {"a": entry("a", a), "b": entry("b", b)}
    full = torch.cat([build(pa, a), build(pb, b)], 0)
    sources = {"a": a, "b": b}
    for start, stop in [(0, 8), (4, 12), (8, 16), (6, 7), (9, 10), (0, 16)]:
        pieces = narrow(tensor, entries, 0, start, stop)
        got = torch.cat([build(p, sources[p.source]) for p in pieces], 0)
        assert torch.equal(got, full[start:stop]), (start, stop)
        assert pieces_shape(pieces, entries, "concat", 0) == list(got.shape)
    # another dim narrows every piece
    pieces = narrow(tensor, entries, 1, 1, 3)
    got = torch.cat([build(p, sources[p.source]) for p in pieces], 0)
    assert torch.equal(got, full[:, 1:3])
