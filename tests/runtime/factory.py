"""Random MoE layers in every runtime format, and independent decoders (tests only).

Storage is drawn directly as random bytes / codes (fresh per seed, never zeros) with scales
sized so activations stay O(1). The decoders follow FORMATS.md section 2 with ml_dtypes for
the element values, independent of the kernels and of the codecs.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch

from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights, Projection

FORMATS = ("bf16", "fp8_block", "fp8_w8a8", "mxfp4", "nvfp4", "int4")

#: RMS of a uniformly random E2M1 code's value
_FP4_RMS = math.sqrt(sum(v * v for v in (0, 0.5, 1, 1.5, 2, 3, 4, 6)) / 8)


def scheme_for(fmt: str, block: int = 128) -> Scheme:
    if fmt == "bf16":
        return Scheme(format=WeightFormat.UNQUANTIZED, weight_dtypes=("BF16",))
    if fmt in ("fp8_block", "fp8_w8a8"):
        return Scheme(
            format=WeightFormat.FP8_BLOCK,
            weight_dtypes=("F8_E4M3",),
            block=(block, block),
            scale_suffix="weight_scale_inv",
            scale_dtypes=("F32",),
            activation="dynamic" if fmt == "fp8_w8a8" else None,
        )
    if fmt == "fp8_channel":
        return Scheme(
            format=WeightFormat.FP8_PER_CHANNEL,
            weight_dtypes=("F8_E4M3",),
            scale_suffix="weight_scale",
            scale_dtypes=("F32",),
        )
    if fmt == "mxfp4":
        return Scheme(
            format=WeightFormat.MXFP4,
            weight_dtypes=("U8",),
            group_size=32,
            scale_suffix="weight_scale",
            scale_dtypes=("U8",),
            scale_is_e8m0=True,
        )
    if fmt == "nvfp4":
        return Scheme(
            format=WeightFormat.NVFP4,
            weight_dtypes=("U8",),
            group_size=16,
            scale_suffix="weight_scale",
            scale_dtypes=("F8_E4M3",),
            global_scale_suffix="weight_scale_2",
        )
    if fmt == "int4":  # compressed-tensors pack-quantized, symmetric, groups of 32
        return Scheme(
            format=WeightFormat.INT4,
            weight_dtypes=("I32",),
            group_size=32,
            weight_suffix="weight_packed",
            scale_suffix="weight_scale",
            scale_dtypes=("BF16",),
        )
    raise ValueError(fmt)


def random_projection(
    fmt: str, out: int, inp: int, gen: torch.Generator, *, block: int = 128, name: str = ""
) -> Projection:
    """A random ``[out, inp]`` projection stored in ``fmt`` with unit-gain scaling."""
    scheme = scheme_for(fmt, block)
    gain = 1.0 / math.sqrt(inp)
    if fmt == "bf16":
        w = (torch.randn(out, inp, generator=gen) * gain).to(torch.bfloat16)
        return Projection({"weight": w}, scheme, name)
    if fmt in ("fp8_block", "fp8_w8a8", "fp8_channel"):
        w = (torch.randn(out, inp, generator=gen) * 32).clamp(-448, 448).to(torch.float8_e4m3fn)
        if fmt == "fp8_channel":
            shape: tuple[int, ...] = (out,)
        else:
            shape = (-(-out // block), -(-inp // block))
        s = (torch.rand(shape, generator=gen) + 0.5) * gain / 32
        return Projection({"weight": w, "scale": s}, scheme, name)
    if fmt == "int4":  # any eight nibbles a word; values -8..7, RMS ~4.6
        words = torch.randint(-(2**31), 2**31, (out, inp // 8), generator=gen).to(torch.int32)
        s = ((torch.rand(out, inp // 32, generator=gen) + 0.5) * gain / 4.6).to(torch.bfloat16)
        return Projection({"weight": words, "scale": s}, scheme, name)
    packed = torch.randint(0, 256, (out, inp // 2), generator=gen, dtype=torch.uint8)
    if fmt == "mxfp4":
        center = 127 + round(math.log2(gain / _FP4_RMS))
        s = torch.randint(center - 1, center + 2, (out, -(-inp // 32)), generator=gen)
        return Projection({"weight": packed, "scale": s.to(torch.uint8)}, scheme, name)
    s = (torch.rand(out, -(-inp // 16), generator=gen) * 3 + 0.25).to(torch.float8_e4m3fn)
    g = torch.tensor(gain / _FP4_RMS / 1.5, dtype=torch.float32)
    return Projection({"weight": packed, "scale": s, "global_scale": g}, scheme, name)


def random_expert(
    fmt: str, hidden: int, inter: int, gen: torch.Generator, *, block: int = 128, name: str = "e"
) -> ExpertWeights:
    return ExpertWeights(
        gate=random_projection(fmt, inter, hidden, gen, block=block, name=f"{name}.gate_proj"),
        up=random_projection(fmt, inter, hidden, gen, block=block, name=f"{name}.up_proj"),
        down=random_projection(fmt, hidden, inter, gen, block=block, name=f"{name}.down_proj"),
    )


def random_layer(
    fmt: str,
    *,
    hidden: int = 64,
    inter: int = 64,
    n_routed: int = 6,
    n_shared: int = 1,
    fused: bool = False,
    block: int = 128,
    seed: int = 0,
    shared_fmt: str | None = None,
    shared_gate: bool = False,
) -> MoeLayerWeights:
    """A layer with ``n_routed`` routed and ``n_shared`` shared experts (fused or separate)."""
    gen = torch.Generator().manual_seed(seed)
    routed = [
        random_expert(fmt, hidden, inter, gen, block=block, name=f"experts.{e}")
        for e in range(n_routed)
    ]
    shared = [
        random_expert(shared_fmt or fmt, hidden, inter, gen, block=block, name=f"shared.{j}")
        for j in range(n_shared)
    ]
    router = (torch.randn(n_routed, hidden, generator=gen) / math.sqrt(hidden)).to(torch.bfloat16)
    bias = torch.randn(n_routed, generator=gen) * 0.1
    gate = torch.randn(1, hidden, generator=gen).to(torch.bfloat16) if shared_gate else None
    return MoeLayerWeights(
        experts=routed + (shared if fused else []),
        router_weight=router,
        e_score_correction_bias=bias,
        shared=[] if fused else shared,
        n_fused_shared=n_shared if fused else 0,
        shared_gate_weight=gate,
    )


def fuse_shared(layer: MoeLayerWeights) -> MoeLayerWeights:
    """The same layer with its separate shared experts moved into fused slots."""
    return MoeLayerWeights(
        experts=[*layer.experts, *layer.shared],
        router_weight=layer.router_weight,
        e_score_correction_bias=layer.e_score_correction_bias,
        n_fused_shared=len(layer.shared),
        shared_gate_weight=layer.shared_gate_weight,
    )


# --- independent decoders (FORMATS.md section 2, element values from ml_dtypes) -------------


def _fp4_values(packed: torch.Tensor) -> torch.Tensor:
    b = packed.view(torch.uint8).numpy()
    codes = np.stack([b & 0x0F, b >> 4], axis=-1).reshape(*b.shape[:-1], 2 * b.shape[-1])
    return torch.from_numpy(codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32))


def _fp8_values(t: torch.Tensor) -> torch.Tensor:
    b = t.view(torch.uint8).numpy()
    return torch.from_numpy(b.view(ml_dtypes.float8_e4m3fn).astype(np.float32))


def _expand(scale: torch.Tensor, rows: int, cols: int, shape: tuple[int, int]) -> torch.Tensor:
    s = scale.repeat_interleave(rows, 0).repeat_interleave(cols, 1)
    return s[: shape[0], : shape[1]]


def decode_projection(proj: Projection) -> torch.Tensor:
    """float32 ``[out, in]`` of a test projection, without the codecs or the kernels."""
    fmt, parts = proj.scheme.format, proj.parts
    w = parts["weight"]
    if fmt is WeightFormat.UNQUANTIZED:
        return w.float()
    if fmt is WeightFormat.FP8_BLOCK:
        bn, bk = proj.scheme.block
        vals = _fp8_values(w)
        return vals * _expand(parts["scale"].float(), bn, bk, tuple(vals.shape))
    if fmt is WeightFormat.FP8_PER_CHANNEL:
        return _fp8_values(w) * parts["scale"].float().reshape(-1, 1)
    if fmt is WeightFormat.INT4:  # value j of a word in bits 4j..4j+3, stored as q + 8
        u = w.numpy().view(np.uint32)
        nib = np.stack([(u >> (4 * j)) & 0xF for j in range(8)], axis=-1).reshape(u.shape[0], -1)
        vals = torch.from_numpy(nib.astype(np.float32) - 8.0)
        return vals * _expand(parts["scale"].float(), 1, 32, tuple(vals.shape))
    vals = _fp4_values(w)
    if fmt is WeightFormat.MXFP4:
        s = torch.exp2(parts["scale"].view(torch.uint8).to(torch.float64) - 127).float()
        return vals * _expand(s, 1, 32, tuple(vals.shape))
    if fmt is WeightFormat.NVFP4:
        s = _fp8_values(parts["scale"])
        return vals * _expand(s, 1, 16, tuple(vals.shape)) * parts["global_scale"].float()
    raise ValueError(fmt)
