"""Byte geometry of one source tensor's contribution to an output: regions kept, pads added.

A neutral module (no imports from the rest of ckpt): the storage codecs describe slices and
pads in these terms, the planner records them in a ``Piece``, the executor applies them.
Immutable named tuples: a full-size plan holds ~10^5 of them, and equal ones are shared.

All coordinates are **storage** coordinates: the tensor as its safetensors header stores it
(packed FP4 ``U8 [out, in/2]`` slices in bytes along the last dim; group scales in groups).

Example (rank 1 of 2 of an MXFP4 down projection, padded from 96 to 128 per rank)::

    Piece(source="model.layers.3.mlp.experts.7.down_proj.weight",
          slices=(Region(dim=1, start=48, stop=96),),
          pads=(Pad(dim=1, amount=16, fill="00"),))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class Region(NamedTuple):
    """Keep ``[start, stop)`` along ``dim`` of the source tensor (storage coordinates)."""

    dim: int
    start: int
    stop: int


class Pad(NamedTuple):
    """Append ``amount`` elements along ``dim``, each element the bytes ``fill`` (hex, LE).

    ``fill`` examples: ``"00"`` zero FP4/FP8/U8, ``"7f"`` E8M0 scale 1.0, ``"0000803f"`` F32 1.0,
    ``"3f80"`` is *not* valid for BF16 (little-endian): BF16 1.0 is ``"803f"``.
    """

    dim: int
    amount: int
    fill: str = "00"


class _PieceFields(NamedTuple):
    source: str
    slices: tuple[Region, ...] = ()
    pads: tuple[Pad, ...] = ()
    requant: str | None = None


class Piece(_PieceFields):
    """One source tensor, sliced (regions applied in order) then padded (pads in order).

    ``requant``: the scheme the source is requantized to before slicing (``"mxfp4"``: the
    source weight's MXFP4 codes, or the E8M0 scales when ``source`` names ``weight_scale``,
    ``execute.requant_node``); None: the source's bytes as stored."""

    __slots__ = ()

    def __new__(
        cls,
        source: str,
        slices: Iterable[Region] = (),
        pads: Iterable[Pad] = (),
        requant: str | None = None,
    ) -> Piece:
        return super().__new__(cls, source, tuple(slices), tuple(pads), requant)

    @classmethod
    def of(
        cls,
        source: str,
        slices: tuple[Region, ...],
        pads: tuple[Pad, ...],
        requant: str | None = None,
    ) -> Piece:
        """A piece from tuples as they are (no copies: the planner's hot path)."""
        return tuple.__new__(cls, (source, slices, pads, requant))
