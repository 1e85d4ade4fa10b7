"""Stack one projection of many experts into the kernels' per-format tensors ``[E, N, K]``.

The storage bytes are kept as the checkpoint has them (no dequantization here): the grouped
GEMM decodes them in the kernel. Only scale *encodings* that the kernel does not read are
converted once (block/channel/tensor FP8 scales -> float32 blocks; E8M0 FP8 block scales are
decoded with the codecs' E8M0 helper).

| format | weight | scale | global |
|---|---|---|---|
| BF16/F16/F32 | as stored ``[E, N, K]`` | - | - |
| FP8 block/channel/tensor | float8_e4m3fn ``[E, N, K]`` | f32 ``[E, ceil(N/bn), ceil(K/bk)]`` | - |
| MXFP4 | uint8 ``[E, N, K/2]`` | uint8 E8M0 ``[E, N, K/32]`` | - |
| NVFP4 | uint8 ``[E, N, K/2]`` | float8_e4m3fn ``[E, N, K/16]`` | f32 ``[E]`` |
| INT4 (symmetric) | int32 ``[E, N, K/8]`` | f32 ``[E, N, K/group]`` | - |

A compressed-tensors NVFP4 global scale divides (``weight_global_scale``): its reciprocal is
stacked, so the kernel always multiplies.

Example::

    gate = stack_projections([ex.gate for ex in layer.experts])
    gate.weight.shape   # torch.Size([257, 2048, 3584]) for MXFP4 DeepSeek-V3 gate_proj
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.codecs.e8m0 import decode_e8m0
from checkpoint_tool.runtime.weights import Projection

#: a scale block this large covers a whole row / column (per-channel / per-tensor FP8)
WHOLE = 1 << 30


class KernelFormat(IntEnum):
    """The kernel's ``FMT`` constexpr (w8a8 is FP8 weights with FP8 activations)."""

    BF16 = 0
    FP8 = 1
    FP8_W8A8 = 2
    MXFP4 = 3
    NVFP4 = 4
    INT4 = 5


@dataclass(frozen=True)
class StackedWeights:
    """One projection of ``E`` experts in kernel layout (see module table)."""

    fmt: KernelFormat
    weight: torch.Tensor
    scale: torch.Tensor | None
    global_scale: torch.Tensor | None
    #: logical output rows N and input columns K
    n: int
    k: int
    #: FP8 only: rows and columns covered by one scale entry
    scale_block: tuple[int, int] = (1, 1)
    #: INT4 only: inputs per scale
    group: int = 0

    @property
    def num_experts(self) -> int:
        return int(self.weight.shape[0])

    @property
    def group_size(self) -> int:
        return {KernelFormat.MXFP4: 32, KernelFormat.NVFP4: 16}.get(self.fmt, self.group)

    def storage_bytes(self, experts: int | None = None) -> int:
        """Bytes of weight + scales for ``experts`` experts (default all)."""
        total = sum(
            t.numel() * t.element_size()
            for t in (self.weight, self.scale, self.global_scale)
            if t is not None
        )
        return total if experts is None else total * experts // self.num_experts

    def to(self, device: torch.device | str) -> StackedWeights:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return StackedWeights(
            self.fmt,
            self.weight.to(device),
            move(self.scale),
            move(self.global_scale),
            self.n,
            self.k,
            self.scale_block,
            self.group,
        )


def stack_projections(projs: Sequence[Projection], *, w8a8: bool = False) -> StackedWeights:
    """Stack ``projs`` (one per expert, same scheme and shape) for the grouped GEMM."""
    if not projs:
        raise InputError("stack_projections: no projections")
    first = projs[0]
    for p in projs[1:]:
        if p.scheme.format != first.scheme.format or p.scheme.block != first.scheme.block:
            raise InputError(
                f"{p.label}: scheme {p.scheme.short()} differs from {first.label} "
                f"({first.scheme.short()}); one grouped GEMM needs one format"
            )
        if p.logical_shape != first.logical_shape:
            raise InputError(
                f"{p.label}: shape {list(p.logical_shape)} differs from "
                f"{first.label} {list(first.logical_shape)}"
            )
    n, k = first.logical_shape
    kernel = KernelFormat[first.fmt.kernel or ""]  # Projection refuses a format without one
    weight = stack_tensors([p.weight for p in projs])
    if kernel is KernelFormat.BF16:
        return StackedWeights(KernelFormat.BF16, weight, None, None, n, k)
    if kernel is KernelFormat.FP8:
        block = _fp8_scale_block(first)
        scale = stack_tensors([_fp8_scale(p, n, k, block) for p in projs])
        kfmt = KernelFormat.FP8_W8A8 if w8a8 else KernelFormat.FP8
        return StackedWeights(kfmt, _as_fp8(weight, first), scale, None, n, k, block)
    scale = stack_tensors([_required(p, "scale") for p in projs])
    if kernel is KernelFormat.INT4:
        return _stack_int4(first, weight, scale, n, k)
    if kernel is KernelFormat.MXFP4:
        _check_group_scale(first, scale, n, k, 32)
        return StackedWeights(KernelFormat.MXFP4, _as_u8(weight), _as_u8(scale), None, n, k)
    _check_group_scale(first, scale, n, k, 16)
    glob = torch.stack([_required(p, "global_scale").float().reshape(()) for p in projs])
    if first.scheme.global_scale_divides:  # compressed-tensors weight_global_scale
        glob = 1.0 / glob
    scale = scale if scale.dtype == torch.float8_e4m3fn else scale.view(torch.float8_e4m3fn)
    return StackedWeights(KernelFormat.NVFP4, _as_u8(weight), scale, glob, n, k)


def stack_tensors(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.stack``, without a copy when the tensors are ``base[0], base[1], ...`` in order.

    Fused 3-D checkpoint tensors (``experts.gate_up_proj [E, 2I, H]``) and benchmark data
    arrive as such views; stacking them again would double the memory of a layer.
    """
    first = tensors[0]
    base = first._base
    if (
        base is not None
        and base.dim() == first.dim() + 1
        and base.shape[0] == len(tensors)
        and all(
            t._base is base
            and t.shape == base.shape[1:]
            and t.stride() == base.stride()[1:]
            and t.data_ptr() == base.data_ptr() + e * base.stride(0) * base.element_size()
            for e, t in enumerate(tensors)
        )
    ):
        return base if base.dtype == first.dtype else base.view(first.dtype)
    return torch.stack(list(tensors))


def _required(p: Projection, role: str) -> torch.Tensor:
    if role not in p.parts:
        raise InputError(
            f"{p.label}: {p.scheme.short()} needs a {role!r} tensor (have {sorted(p.parts)})"
        )
    return p.parts[role]


def _as_u8(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def _as_fp8(t: torch.Tensor, p: Projection) -> torch.Tensor:
    if t.dtype == torch.float8_e4m3fn:
        return t
    if t.dtype in (torch.uint8, torch.int8):
        return t.view(torch.float8_e4m3fn)
    raise InputError(f"{p.label}: FP8 weight stored as {t.dtype}; expected F8_E4M3 or U8 bytes")


def _fp8_scale_block(p: Projection) -> tuple[int, int]:
    """Logical ``(rows, cols)`` one scale covers (``Format.scale_block``), WHOLE for a whole dim."""
    try:
        rows, cols = p.fmt.scale_block(p.scheme)
    except InputError as exc:
        raise InputError(f"{p.label}: {exc}") from None
    return (WHOLE if rows is None else rows, WHOLE if cols is None else cols)


def _fp8_scale(p: Projection, n: int, k: int, block: tuple[int, int]) -> torch.Tensor:
    """float32 scale ``[ceil(N/bn), ceil(K/bk)]`` of one FP8 projection."""
    s = _required(p, "scale")
    if p.scheme.scale_is_e8m0 or s.dtype in (torch.float8_e8m0fnu, torch.uint8):
        s = decode_e8m0(s)
    s = s.float()
    rows, cols = -(-n // block[0]), -(-k // block[1])
    if s.numel() != rows * cols:
        raise InputError(
            f"{p.label}: scale has shape {tuple(s.shape)}, expected [{rows}, {cols}] "
            f"for a [{n}, {k}] weight with {p.scheme.short()}"
        )
    return s.reshape(rows, cols)


def _stack_int4(
    p: Projection, weight: torch.Tensor, scale: torch.Tensor, n: int, k: int
) -> StackedWeights:
    """INT4 words as stored, group scales in float32 (symmetric only: the kernel subtracts 8)."""
    if p.scheme.zero_point_suffix is not None:
        raise InputError(
            f"{p.label}: asymmetric int4 (zero points) runs on the torch backend only; "
            "pass --backend torch"
        )
    group = int(p.scheme.group_size or 0)
    _check_group_scale(p, scale, n, k, group)
    return StackedWeights(
        KernelFormat.INT4, weight.to(torch.int32), scale.float(), None, n, k, group=group
    )


def _check_group_scale(p: Projection, scale: torch.Tensor, n: int, k: int, group: int) -> None:
    expected = (n, -(-k // group))
    if tuple(scale.shape[1:]) != expected:
        raise InputError(
            f"{p.label}: scale shape {tuple(scale.shape[1:])} != {list(expected)} for a "
            f"[{n}, {k}] {p.scheme.short()} weight (one scale per {group} inputs)"
        )
