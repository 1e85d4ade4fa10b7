"""Apply plan ops (``Region`` slices, ``Pad`` appends) to storage tensors.

Used by the executor and the codecs' tensor-level ``slice``/``pad``. Works on any storage
dtype: pads are built from the fill bytes and reinterpreted, never cast.

Example::

    t = torch.zeros(4, 8, dtype=torch.uint8)
    apply_region(t, Region(dim=1, start=2, stop=6)).shape       # (4, 4)
    apply_pad(t, Pad(dim=0, amount=2, fill="7f"))[4:]           # two rows of 0x7f
"""

from __future__ import annotations

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.regions import Pad, Region


def apply_region(t: torch.Tensor, region: Region) -> torch.Tensor:
    """Keep ``[start, stop)`` along ``region.dim`` (a view, no copy)."""
    if t.dim() == 0 or not -t.dim() <= region.dim < t.dim():
        raise InputError(
            f"region dim {region.dim} does not exist in a tensor of shape {list(t.shape)}"
        )
    n = t.shape[region.dim]
    if not 0 <= region.start <= region.stop <= n:
        raise InputError(
            f"region [{region.start}, {region.stop}) is outside dim {region.dim} of size {n}"
        )
    return t.narrow(region.dim, region.start, region.stop - region.start)


def apply_pad(t: torch.Tensor, pad: Pad) -> torch.Tensor:
    """Append ``pad.amount`` elements along ``pad.dim``, each the bytes ``pad.fill``."""
    if t.dim() == 0 or not -t.dim() <= pad.dim < t.dim():
        raise InputError(f"pad dim {pad.dim} does not exist in a tensor of shape {list(t.shape)}")
    fill = bytes.fromhex(pad.fill)
    esize = t.element_size()
    if len(fill) != esize:
        raise InputError(
            f"pad fill '{pad.fill}' has {len(fill)} bytes, the tensor's {t.dtype} elements have {esize}"
        )
    dim = pad.dim % t.dim()
    shape = list(t.shape)
    shape[dim] = pad.amount
    count = 1
    for s in shape:
        count *= s
    raw = torch.tensor(list(fill), dtype=torch.uint8).repeat(count)
    block = raw.reshape(*shape[:-1], shape[-1] * esize).view(t.dtype) if shape[-1] else None
    if block is None:
        block = torch.empty(shape, dtype=t.dtype)
    return torch.cat((t, block.to(t.device)), dim=dim)
