"""Narrow a planned tensor's pieces to a range of one storage dim (a TP rank's share).

A planned (HF-layout) tensor is one piece, or pieces concatenated along an axis, each a source
region followed by pads (``plan.model``). Taking storage ``[start, stop)`` of dim ``d`` of it
keeps, per piece, the overlapping part of its source region (a further ``Region``, relative to
the piece's current extent, as the executor composes them) and the overlapping part of its
pads on ``d``; pads on other dims are kept. Ranges past the tensor's end are zero/neutral
padding added by the caller, never by this module.

Example (rank 1 of 2 of an MXFP4 down weight planned as source [7168, 80] + pad 16 bytes)::

    narrow(tensor, catalog, dim=1, start=48, stop=96)
    # [Piece(source=..., slices=[Region(dim=1, start=48, stop=80)],
    #        pads=[Pad(dim=1, amount=16, fill='00')])]
"""

from __future__ import annotations

from collections.abc import Mapping

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.errors import InputError
from checkpoint_tool.plan.model import OutputTensor, Pad, Piece, Region
from checkpoint_tool.plan.summary import storage_shape


def _axis(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def piece_shape(piece: Piece, entry: TensorEntry) -> list[int]:
    """Storage shape a piece produces (its regions, then its pads)."""
    shape = list(storage_shape(entry.dtype, entry.shape))
    for r in piece.slices:
        shape[_axis(r.dim, len(shape))] = r.stop - r.start
    for p in piece.pads:
        shape[_axis(p.dim, len(shape))] += p.amount
    return shape


def _source_extent(piece: Piece, entry: TensorEntry, dim: int) -> int:
    shape = list(storage_shape(entry.dtype, entry.shape))
    for r in piece.slices:
        shape[_axis(r.dim, len(shape))] = r.stop - r.start
    return shape[dim]


def narrow_piece(piece: Piece, entry: TensorEntry, dim: int, start: int, stop: int) -> Piece:
    """``piece`` restricted to storage ``[start, stop)`` of ``dim`` (0 <= start <= stop <=
    the piece's extent there)."""
    rank = len(storage_shape(entry.dtype, entry.shape))
    dim = _axis(dim, rank)
    extent = piece_shape(piece, entry)[dim]
    if not 0 <= start <= stop <= extent:
        raise InputError(
            f"{entry.name}: range [{start}, {stop}) is outside dim {dim} of its planned piece "
            f"({extent}); the plan is inconsistent, re-plan"
        )
    src = _source_extent(piece, entry, dim)
    slices = list(piece.slices)
    a, b = min(start, src), min(stop, src)
    if (a, b) != (0, src):
        slices.append(Region(dim=dim, start=a, stop=b))
    pads: list[Pad] = []
    pos = src
    for pad in piece.pads:
        if _axis(pad.dim, rank) != dim:
            pads.append(pad)
            continue
        lo, hi = max(start, pos), min(stop, pos + pad.amount)
        if hi > lo:
            pads.append(Pad(dim=dim, amount=hi - lo, fill=pad.fill))
        pos += pad.amount
    return Piece(source=piece.source, slices=slices, pads=pads)


def narrow(
    tensor: OutputTensor, entries: Mapping[str, TensorEntry], dim: int, start: int, stop: int
) -> list[Piece]:
    """The pieces of storage ``[start, stop)`` of ``dim`` of planned ``tensor``, in order
    (concatenated along ``dim`` when several)."""
    if tensor.combine == "single":
        piece = tensor.pieces[0]
        return [narrow_piece(piece, entries[piece.source], dim, start, stop)]
    if tensor.combine != "concat":
        raise InputError(f"{tensor.name}: cannot narrow a {tensor.combine} of pieces; re-plan")
    first = entries[tensor.pieces[0].source]
    rank = len(storage_shape(first.dtype, first.shape))
    if _axis(tensor.axis, rank) != _axis(dim, rank):
        return [narrow_piece(p, entries[p.source], dim, start, stop) for p in tensor.pieces]
    out, pos = [], 0
    for p in tensor.pieces:
        entry = entries[p.source]
        n = piece_shape(p, entry)[_axis(dim, rank)]
        lo, hi = max(start, pos), min(stop, pos + n)
        if hi > lo:
            out.append(narrow_piece(p, entry, dim, lo - pos, hi - pos))
        pos += n
    return out


def pieces_shape(
    pieces: list[Piece], entries: Mapping[str, TensorEntry], combine: str, axis: int
) -> list[int]:
    """Storage shape of ``pieces`` combined (``single`` / ``concat`` on ``axis`` / ``stack``)."""
    shapes = [piece_shape(p, entries[p.source]) for p in pieces]
    if combine == "stack":
        return [len(shapes), *shapes[0]]
    out = list(shapes[0])
    if combine == "concat":
        out[axis] = sum(s[axis] for s in shapes)
    return out
