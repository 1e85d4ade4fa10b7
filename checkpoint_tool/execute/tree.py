"""An output tensor's node tree (``execute.ops``) built from its plan entry.

``build_node`` turns one ``OutputTensor`` (pieces, pads, concat/stack) into ``PieceNode`` /
``CombineNode`` trees over the source tensors, checked against the planned dtype and shape; a
requantized piece (``Piece.requant`` set) becomes an ``execute.requant_node`` node, a
tensor with no pieces but a ``fill`` a constant block.

Example (rank 1 of 2 of a ``[4, 6]`` BF16 down projection, padded from 3 to 4 columns)::

    node = build_node(out_tensor, catalog.tensors)
    node.shape, node.itemsize   # ((4, 4), 2)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.catalog.safetensors_format import storage_layout
from checkpoint_tool.errors import InputError
from checkpoint_tool.execute.ops import CombineNode, Node, PieceNode, byte_strides, piece_node
from checkpoint_tool.execute.requant_node import RequantCache, read_name, requant_node
from checkpoint_tool.plan.model import OutputFile, OutputTensor


def files_read(sources: Mapping[str, TensorEntry], files: Iterable[OutputFile]) -> list[str]:
    """The source shards the output ``files`` read (sorted), e.g.
    ``['model-00001-of-00002.safetensors']``; a requantized piece reads its module's weight."""
    return sorted(
        {sources[read_name(p)].file for f in files for t in f.tensors for p in t.pieces}
    )


def build_node(
    out: OutputTensor, sources: Mapping[str, TensorEntry], requant: RequantCache | None = None
) -> Node:
    """The node tree of one output tensor, checked against its planned dtype and shape.
    ``requant``: the run's cache of requantized modules (default: one for this tensor alone).

    A ``single`` piece may differ from the planned shape by size-1 dims (``[1, I, H]`` cut from a
    fused ``[E, 2I, H]`` parameter is written as ``[I, H]``): the bytes are the same.
    """
    if not out.pieces:
        if out.fill is not None:
            return _constant_node(out)
        raise InputError(f"{out.name}: the plan gives no source pieces; re-plan")
    pieces: list[Node] = []
    for piece in out.pieces:
        if piece.requant is not None:  # a requantized source (``execute.requant_node``)
            if requant is None:
                requant = RequantCache(max_bytes=0)
            pieces.append(requant_node(piece, sources, out.name, requant))
            continue
        entry = sources.get(piece.source)
        if entry is None:
            raise InputError(
                f"{out.name}: source tensor {piece.source!r} is not in the source checkpoint; "
                "the plan was built for another source, re-plan"
            )
        pieces.append(piece_node(piece, entry, out.name))
    want, itemsize = storage_layout(out.dtype, tuple(out.shape))
    if any(p.itemsize != itemsize for p in pieces):
        raise InputError(
            f"{out.name}: planned dtype {out.dtype} has {itemsize}-byte elements but a source "
            "piece has a different element size; the plan is inconsistent, re-plan"
        )
    if out.combine == "single":
        if len(pieces) != 1:
            raise InputError(f"{out.name}: combine 'single' with {len(pieces)} pieces; re-plan")
        node: Node = pieces[0]
        squeeze = tuple(n for n in node.shape if n != 1) == tuple(n for n in want if n != 1)
        if node.shape != want and squeeze and math.prod(node.shape) == math.prod(want):
            node = _reshaped(node, want)
    else:
        rank = len(pieces[0].shape) + (1 if out.combine == "stack" else 0)
        axis = out.axis + rank if out.axis < 0 else out.axis
        if not 0 <= axis < rank:
            raise InputError(f"{out.name}: {out.combine} axis {out.axis} out of range; re-plan")
        _check_combinable(out, pieces, axis)
        node = CombineNode(tuple(pieces), out.combine, axis)
        if out.combine == "stack" and axis == 0 and math.prod(node.shape) == math.prod(want):
            return node  # pieces back to back: the same bytes as any shape of that size
    if tuple(node.shape) != tuple(want):
        raise InputError(
            f"{out.name}: pieces give storage shape {list(node.shape)} but the plan says "
            f"{out.dtype}{list(out.shape)} (storage {list(want)}); the plan is inconsistent, re-plan"
        )
    return node


def _constant_node(out: OutputTensor) -> Node:
    """A tensor whose every element is ``out.fill`` (no source file)."""
    shape, itemsize = storage_layout(out.dtype, tuple(out.shape))
    fill = bytes.fromhex(out.fill or "")
    if len(fill) != itemsize:
        raise InputError(
            f"{out.name}: fill {out.fill!r} does not fit {out.dtype} ({itemsize}-byte elements); "
            "the plan is inconsistent, re-plan"
        )
    if not out.shape:  # 0-d: storage_layout counts sub-byte scalars as (1,)
        shape = ()
    return PieceNode(None, 0, shape, itemsize, tuple((0, n) for n in shape), (), fill)


def _check_combinable(out: OutputTensor, pieces: list[Node], axis: int) -> None:
    first = pieces[0].shape
    for p in pieces[1:]:
        same = (
            p.shape == first
            if out.combine == "stack"
            else len(p.shape) == len(first)
            and all(
                a == b for d, (a, b) in enumerate(zip(p.shape, first, strict=True)) if d != axis
            )
        )
        if not same:
            raise InputError(
                f"{out.name}: cannot {out.combine} pieces of shapes {list(first)} and "
                f"{list(p.shape)} on axis {axis}; the plan is inconsistent, re-plan"
            )


def _reshaped(node: Node, shape: tuple[int, ...]) -> Node:
    """Drop or insert size-1 dims of a piece (same bytes, same order); unchanged if impossible.

    Droppable: leading size-1 dims (their start folds into the base offset) and dims of size 1
    in the source. Inserted: size-1 dims (source size 1), which change no stride.
    """
    if not isinstance(node, PieceNode):
        return node
    padded = {d for d, a, _ in node.pads if a}
    strides = byte_strides(node.src_shape, node.itemsize)
    base, kept, leading = node.base, [], True
    for d, n in enumerate(node.shape):
        droppable = n == 1 and d not in padded and (leading or node.src_shape[d] == 1)
        if droppable:
            if node.file is not None:
                base += node.box[d][0] * strides[d]
            continue
        leading = False
        kept.append(d)
    new_src: list[int] = []
    new_box: list[tuple[int, int]] = []
    new_pos: dict[int, int] = {}
    it = iter(kept)
    pending = next(it, None)
    for n in shape:
        if pending is not None and node.shape[pending] == n:
            new_pos[pending] = len(new_box)
            new_src.append(node.src_shape[pending])
            new_box.append(node.box[pending])
            pending = next(it, None)
        elif n == 1:
            new_src.append(1)
            new_box.append((0, 1))
        else:
            return node
    if pending is not None:
        return node
    pads = tuple((new_pos[d], a, f) for d, a, f in node.pads if d in new_pos)
    if len(pads) != len(node.pads):
        return node
    return PieceNode(node.file, base, tuple(new_src), node.itemsize, tuple(new_box), pads,
                     node.fill)  # fmt: skip
