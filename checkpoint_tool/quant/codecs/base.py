"""The ``WeightCodec`` contract: a format's storage (``checkpoint_tool.formats``) plus numbers.

A quantized weight is a dict of storage tensors by role (``"weight"``, ``"scale"``, NVFP4's
``"global_scale"``). Shapes, alignment, storage regions and pads come from the format's
``StorageFormat`` (no torch); a codec adds quantize/dequantize and applies slices and pads
to real tensors.

Example (MXFP4, logical ``[4, 64]``)::

    parts = codec.quantize(torch.randn(4, 64))       # {'weight': U8 [4, 32], 'scale': U8 [4, 2]}
    codec.slice(parts, -1, 32, 64)["scale"].shape    # torch.Size([4, 1])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats.storage import Axis, Shape, StorageFormat
from checkpoint_tool.quant.codecs.ops import apply_pad, apply_region
from checkpoint_tool.quant.scheme import WeightFormat
from checkpoint_tool.regions import Pad, Region

__all__ = ["Axis", "BaseCodec", "Parts", "Shape", "WeightCodec"]

Parts = dict[str, torch.Tensor]


@runtime_checkable
class WeightCodec(Protocol):
    """What every format implements (see CODEC_API.md)."""

    format: WeightFormat

    def quantize(self, w: torch.Tensor) -> Parts: ...
    def dequantize(self, parts: Mapping[str, torch.Tensor]) -> torch.Tensor: ...
    def logical_shape(self, parts_or_shapes: Any) -> Shape: ...
    def storage_shapes(self, logical_shape: Shape) -> dict[str, Shape]: ...
    def alignment(self, dim: int, logical_shape: Shape) -> int: ...
    def storage_regions(
        self, logical_shape: Shape, dim: int, start: int, stop: int
    ) -> dict[str, Region | None]: ...
    def storage_pads(
        self, logical_shape: Shape, dim: int, amount: int
    ) -> dict[str, Pad | None]: ...
    def slice(
        self, parts: Mapping[str, torch.Tensor], dim: int, start: int, stop: int
    ) -> Parts: ...
    def pad(self, parts: Mapping[str, torch.Tensor], dim: int, amount: int) -> Parts: ...


class BaseCodec(StorageFormat):
    """A format's storage plus tensor-level slicing and padding (formats add the numbers)."""

    # ---- the numbers: every format implements both -----------------------------------------
    def quantize(self, w: torch.Tensor) -> Parts:
        """Float weight -> storage tensors by role (``{"weight": ..., "scale": ...}``)."""
        raise NotImplementedError(f"{type(self).__name__} does not quantize")

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        """Storage tensors by role -> the float32 logical weight."""
        raise NotImplementedError(f"{type(self).__name__} does not dequantize")

    # ---- tensor-level ops ----------------------------------------------------------------
    def slice(
        self,
        parts: Mapping[str, torch.Tensor],
        dim: int,
        start: int,
        stop: int,
        *,
        name: str | None = None,
    ) -> Parts:
        """Slice every role's storage tensor for logical ``[start, stop)`` on ``dim``."""
        shape = self.check_parts(parts, name=name)
        regions = self.storage_regions(shape, dim, start, stop, name=name)
        return {
            r: (apply_region(t, regions[r]) if regions.get(r) is not None else t)  # type: ignore[arg-type]
            for r, t in parts.items()
        }

    def pad(
        self, parts: Mapping[str, torch.Tensor], dim: int, amount: int, *, name: str | None = None
    ) -> Parts:
        """Pad every role's storage tensor by ``amount`` logical elements on ``dim``."""
        shape = self.check_parts(parts, name=name)
        pads = self.storage_pads(shape, dim, amount, name=name)
        return {
            r: (apply_pad(t, pads[r]) if pads.get(r) is not None else t)  # type: ignore[arg-type]
            for r, t in parts.items()
        }


# ---- numeric helpers shared by the formats -------------------------------------------------


def as_float32(w: torch.Tensor, *, label: str) -> torch.Tensor:
    """Weight to float32, refusing NaN (no format can store it faithfully)."""
    if not (w.is_floating_point()):
        raise InputError(f"{label}: can only quantize float weights, got torch dtype {w.dtype}")
    x = w.to(torch.float32)
    if torch.isnan(x).any():
        raise InputError(f"{label}: the weight contains NaN; cannot quantize it")
    return x


def group_last(x: torch.Tensor, group: int) -> torch.Tensor:
    """``[..., n]`` -> ``[..., ceil(n/group), group]``, zero-padding a partial last group."""
    n = x.shape[-1]
    g = -(-n // group)
    if g * group != n:
        x = torch.nn.functional.pad(x, (0, g * group - n))
    return x.reshape(*x.shape[:-1], g, group)


def expand_last(s: torch.Tensor, group: int, n: int) -> torch.Tensor:
    """Per-group values ``[..., G]`` -> per-element ``[..., n]`` (``G = ceil(n/group)``)."""
    return s.repeat_interleave(group, dim=-1)[..., :n]
