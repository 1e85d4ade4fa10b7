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
from functools import lru_cache

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.catalog.safetensors_format import storage_shape
from checkpoint_tool.errors import InputError
from checkpoint_tool.plan.model import OutputTensor, Pad, Piece, Region


def _axis(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def piece_shape(piece: Piece, entry: TensorEntry) -> list[int]:
    """Storage shape a piece produces (its regions, then its pads)."""
    return list(
        _piece_shape(
            tuple(storage_shape(entry.dtype, entry.shape)),
            tuple((r.dim, r.start, r.stop) for r in piece.slices),
            tuple((p.dim, p.amount) for p in piece.pads),
        )
    )


@lru_cache(maxsize=65536)
def _piece_shape(
    shape: tuple[int, ...],
    slices: tuple[tuple[int, int, int], ...],
    pads: tuple[tuple[int, int], ...],
) -> tuple[int, ...]:
    out = list(shape)
    for d, a, b in slices:
        out[_axis(d, len(out))] = b - a
    for d, n in pads:
        out[_axis(d, len(out))] += n
    return tuple(out)


def _source_extent(piece: Piece, entry: TensorEntry, dim: int) -> int:
    shape = list(storage_shape(entry.dtype, entry.shape))
    for r in piece.slices:
        shape[_axis(r.dim, len(shape))] = r.stop - r.start
    return shape[dim]


def narrow_piece(piece: Piece, entry: TensorEntry, dim: int, start: int, stop: int) -> Piece:
    """``piece`` restricted to storage ``[start, stop)`` of ``dim`` (0 <= start <= stop <=
    the piece's extent there)."""
    return narrow_shaped(piece, entry, dim, start, stop)[0]


def narrow_shaped(
    piece: Piece, entry: TensorEntry, dim: int, start: int, stop: int
) -> tuple[Piece, tuple[int, ...]]:
    """``narrow_piece`` and the storage shape of the result."""
    key = (
        tuple(storage_shape(entry.dtype, entry.shape)),
        tuple([(r.dim, r.start, r.stop) for r in piece.slices]),
        tuple([(p.dim, p.amount, p.fill) for p in piece.pads]),
    )
    try:
        new_slices, new_pads, shape = _narrowed(*key, dim, start, stop)
    except ValueError as exc:
        raise InputError(
            f"{entry.name}: {exc} of its planned piece; the plan is inconsistent, re-plan"
        ) from None
    return Piece(source=piece.source, slices=list(new_slices), pads=list(new_pads)), shape


@lru_cache(maxsize=65536)
def _narrowed(
    shape: tuple[int, ...],
    slices: tuple[tuple[int, int, int], ...],
    pads: tuple[tuple[int, int, str], ...],
    dim: int,
    start: int,
    stop: int,
) -> tuple[tuple[Region, ...], tuple[Pad, ...], tuple[int, ...]]:
    """Regions, pads and storage shape of a narrowed piece, from plain values (cached: the
    experts of a layer are cut alike, so a full-size plan computes each cut once)."""
    rank = len(shape)
    dim = _axis(dim, rank)
    cur = list(shape)
    for d, a, b in slices:
        cur[_axis(d, rank)] = b - a
    src = cur[dim]
    extent = src + sum(n for d, n, _ in pads if _axis(d, rank) == dim)
    if not 0 <= start <= stop <= extent:
        raise ValueError(f"range [{start}, {stop}) is outside dim {dim} ({extent})")
    new_slices = [_region(_axis(d, rank), a, b) for d, a, b in slices]
    a, b = min(start, src), min(stop, src)
    if (a, b) != (0, src):
        new_slices.append(_region(dim, a, b))
    new_pads: list[Pad] = []
    pos = src
    for d, amount, fill in pads:
        if _axis(d, rank) != dim:
            new_pads.append(_pad(_axis(d, rank), amount, fill))
            continue
        lo, hi = max(start, pos), min(stop, pos + amount)
        if hi > lo:
            new_pads.append(_pad(dim, hi - lo, fill))
        pos += amount
    out = list(cur)
    out[dim] = stop - start
    return tuple(new_slices), tuple(new_pads), tuple(out)


@lru_cache(maxsize=4096)
def _region(dim: int, start: int, stop: int) -> Region:
    """Shared (never mutated) regions: a full-size plan cuts the same range from 100k pieces."""
    return Region(dim=dim, start=start, stop=stop)


@lru_cache(maxsize=4096)
def _pad(dim: int, amount: int, fill: str) -> Pad:
    return Pad(dim=dim, amount=amount, fill=fill)


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
    pieces: list[Piece],
    entries: Mapping[str, TensorEntry],
    combine: str,
    axis: int,
    shapes: list[tuple[int, ...]] | None = None,
) -> list[int]:
    """Storage shape of ``pieces`` combined (``single`` / ``concat`` on ``axis`` / ``stack``);
    ``shapes``: the pieces' own shapes when the caller already knows them."""
    if shapes is None:
        shapes = [tuple(piece_shape(p, entries[p.source])) for p in pieces]
    if combine == "stack":
        odd = next((i for i, s in enumerate(shapes) if tuple(s) != tuple(shapes[0])), None)
        if odd is not None:
            raise InputError(
                f"cannot stack {pieces[odd].source!r} {list(shapes[odd])} with "
                f"{pieces[0].source!r} {list(shapes[0])}: the experts differ in shape"
            )
        return [len(shapes), *shapes[0]]
    out = list(shapes[0])
    if combine == "concat":
        out[axis] = sum(s[axis] for s in shapes)
    return out
