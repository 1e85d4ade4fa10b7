"""Turn "these logical ranges of the intermediate dim, each padded to N" into storage pieces.

The codecs own the arithmetic (``storage_regions`` / ``storage_pads``: bytes of packed FP4,
groups of scales, refusals for misaligned cuts); this module applies it to one source tensor
of an expert projection and returns the ``Piece`` list, how to combine it and the output
shape. Fill bytes are recomputed from the tensor's own dtype (zero weights, 1.0 scales in
that dtype's encoding), so a BF16 per-channel scale gets ``803f`` even when the scheme's
default scale dtype is F32.

Example (MXFP4 down weight U8 [7168, 80] = logical [7168, 160], pad 160 -> 192)::

    place(entry, "weight", codec, (7168, 160), -1, [(0, 160)], 192)
    # Placement(pieces=[Piece(source=..., pads=[Pad(dim=1, amount=16, fill='00')])],
    #           combine='single', axis=0, shape=[7168, 96], ...)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.catalog.safetensors_format import element_bytes, header_shape, storage_shape
from checkpoint_tool.errors import AlignmentError, InputError
from checkpoint_tool.quant.roles import CODEC_ROLES
from checkpoint_tool.quant.storage import StorageFormat
from checkpoint_tool.quant.storage.dtypes import one_fill
from checkpoint_tool.regions import Pad, Piece, Region


@dataclass(slots=True)
class Placement:
    """How one output tensor is made from one source tensor."""

    pieces: Sequence[Piece]
    combine: str = "single"
    axis: int = 0
    shape: Sequence[int] = ()
    padded: bool = False
    ops: tuple[str, ...] = ()
    #: the source tensor as it is (same bytes)
    copy: bool = False


@lru_cache(maxsize=4096)
def shape_list(shape: tuple[int, ...]) -> list[int]:
    """One list per distinct shape, shared by every tensor of that shape (a full-size model
    has ~92k tensors and a few hundred shapes): plan shapes are read-only."""
    return list(shape)


def whole(entry: TensorEntry, ops: tuple[str, ...] = ()) -> Placement:
    """The source tensor as it is."""
    return Placement(
        (Piece.of(entry.name, (), ()),), "single", 0, shape_list(entry.shape), False, ops, True
    )


def _fill(entry: TensorEntry, role: str, codec_fill: str = "") -> str:
    """Pad bytes of one element: zero weights (the codec's zero where it is not zero bytes,
    e.g. a symmetric INT4 word ``88888888``), neutral scales in the tensor's own dtype."""
    if role in ("weight", "bias", "zero_point"):
        zero = "00" * element_bytes(entry.dtype)
        return codec_fill if len(codec_fill) == len(zero) and codec_fill != zero else zero
    try:
        return one_fill(entry.dtype)
    except ValueError:
        raise InputError(
            f"tensor '{entry.name}': no neutral value for a {entry.dtype} scale; ckpt cannot pad "
            "it (convert without padding: --tp 1)"
        ) from None


def _plain_ranges(
    entry: TensorEntry, ranges: list[tuple[int, int]], target: int
) -> list[tuple[Region | None, Pad | None]]:
    """A bias indexed by the intermediate dim on its last dim (an expert's ``[I]``, gpt-oss's
    3-D experts' ``[E, 2I]``): no packing, no groups."""
    out: list[tuple[Region | None, Pad | None]] = []
    last = len(entry.shape) - 1
    for start, stop in ranges:
        amount = target - (stop - start)
        pad = Pad(dim=last, amount=amount, fill=_fill(entry, "bias")) if amount > 0 else None
        out.append((Region(dim=last, start=start, stop=stop), pad))
    return out


def place(
    entry: TensorEntry,
    role: str,
    codec: StorageFormat | None,
    logical: tuple[int, ...],
    dim: int,
    ranges: list[tuple[int, int]],
    target: int,
    *,
    on_intermediate_bias: bool = False,
) -> Placement:
    """Place logical ``ranges`` of ``dim`` of the module (weight logical shape ``logical``),
    each padded to ``target``, for the tensor ``entry`` holding ``role`` of that module.

    Roles the codec does not describe (activation scales, 0-d tensors) are copied whole; a
    1-D bias on the intermediate dim (``on_intermediate_bias``) is cut and zero-padded.
    """
    storage = list(storage_shape(entry.dtype, entry.shape))
    cuts: list[tuple[Region | None, Pad | None]]
    if role in CODEC_ROLES and codec is not None and role in codec.roles:
        cuts = []
        nd = len(logical)
        d = dim % nd
        for start, stop in ranges:
            region = codec.storage_regions(logical, d, start, stop, name=entry.name)[role]
            pad = None
            amount = target - (stop - start)
            if amount > 0:
                seg = list(logical)
                seg[d] = stop - start
                pad = codec.storage_pads(tuple(seg), d, amount, name=entry.name)[role]
                if pad is not None:
                    fill = _fill(entry, role, pad.fill)
                    pad = Pad(dim=pad.dim, amount=pad.amount, fill=fill)
            cuts.append((region, pad))
    elif role == "bias" and on_intermediate_bias and len(storage) in (1, 2):
        cuts = _plain_ranges(entry, ranges, target)
    elif not storage or role not in CODEC_ROLES:
        return whole(entry)
    else:
        raise AlignmentError(
            f"tensor '{entry.name}': its scheme has no '{role}' tensor, so ckpt cannot tell how "
            "to cut or pad it; check the quantization config"
        )
    if all(region is None and pad is None for region, pad in cuts):
        return whole(entry)
    if any(region is None for region, _ in cuts):
        raise AlignmentError(
            f"tensor '{entry.name}': cannot split it along the intermediate dim (no such dim "
            f"in its {role} storage of shape {storage})"
        )
    pieces: list[Piece] = []
    shapes: list[list[int]] = []
    padded = False
    for region, pad in cuts:
        assert region is not None
        shape = list(storage)
        slices: list[Region] = []
        if (region.start, region.stop) != (0, storage[region.dim]):
            slices.append(region)
            shape[region.dim] = region.stop - region.start
        pads: list[Pad] = []
        if pad is not None:
            pads.append(pad)
            shape[pad.dim] += pad.amount
            padded = True
        pieces.append(Piece(entry.name, slices, pads))
        shapes.append(shape)
    axis = cuts[0][0].dim  # type: ignore[union-attr]
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return Placement(
        pieces=tuple(pieces),
        combine="single" if len(pieces) == 1 else "concat",
        axis=axis if len(pieces) > 1 else 0,
        shape=header_shape(entry.dtype, out),
        padded=padded,
    )
