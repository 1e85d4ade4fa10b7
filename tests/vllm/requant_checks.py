"""MXFP4 helpers of the requantization engine test: a BF16-shared variant of a Quark source,
the two encodings where ckpt's (= AMD Quark 0.13's) MXFP4 and vLLM's ``downcast_to_mxfp``
may differ, and an independent MXFP4 decoder.

Parameters are loader-judge snapshots (bytes shaped ``[*shape, itemsize]``; MXFP4 codes and
E8M0 scales are uint8, itemsize 1). Example::

    codes, scales = w13[8, ..., 0], w13_scale[8, ..., 0]   # [2I, H/2], [2I, H/32]
    canonical_mxfp4(codes, scales)   # (-0 -> +0, all-zero groups' scale -> 0), same shapes
    dequantize_mxfp4(codes, scales)  # float64 [2I, H]
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

#: E2M1 magnitudes of codes 0..7 (bit 3 is the sign), OCP MX v1.0
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
GROUP = 32


def nibbles(codes: torch.Tensor) -> torch.Tensor:
    """``[..., K/2]`` packed bytes -> ``[..., K]`` codes (element 2k in the low nibble)."""
    c = codes.to(torch.int16)
    return torch.stack([c & 0xF, c >> 4], dim=-1).flatten(-2)


def dequantize_mxfp4(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Values of MXFP4 ``codes`` ``[..., K/2]`` with E8M0 ``scales`` ``[..., K/32]``."""
    n = nibbles(codes)
    mag = E2M1[(n & 7).long()]
    val = torch.where(n >= 8, -mag, mag)
    exp = torch.pow(2.0, scales.to(torch.float64) - 127).repeat_interleave(GROUP, dim=-1)
    return val * exp


def canonical_mxfp4(
    codes: torch.Tensor, scales: torch.Tensor, drop: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same values in one encoding: code 8 (-0) -> 0, and the scale of a group whose 32
    codes are all zero -> 0 (any scale decodes that group to zeros). Groups in ``drop``
    (a ``[..., K/32]`` mask) become zeros: compared elsewhere."""
    n = nibbles(codes)
    n = torch.where(n == 8, torch.zeros_like(n), n)
    if drop is not None:
        n = torch.where(drop.repeat_interleave(GROUP, dim=-1), torch.zeros_like(n), n)
    packed = (n[..., 0::2] | (n[..., 1::2] << 4)).to(torch.uint8)
    zero_group = (n.reshape(*n.shape[:-1], -1, GROUP) == 0).all(dim=-1)
    return packed, torch.where(zero_group, torch.zeros_like(scales), scales)


def group_kinds(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(zero, subnormal)`` masks ``[..., K/32]`` of source ``values`` ``[..., K]``: groups of
    zeros only, and groups holding a float32-subnormal value (``0 < |x| < 2^-126``)."""
    g = values.double().reshape(*values.shape[:-1], -1, GROUP)
    zero = (g == 0).all(dim=-1)
    subnormal = ((g != 0) & (g.abs() < 2.0**-126)).any(dim=-1)
    return zero, subnormal


def encoding_differences(a_codes, a_scales, b_codes, b_scales) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Where two MXFP4 encodings of one tensor differ: ``elements`` (codes that differ),
    ``neg_zero`` (of those, one side -0 and the other +0), ``scales`` (scale bytes that
    differ), ``zero_group_scales`` (of those, in groups whose codes are all zero on both
    sides), ``element_count`` and ``group_count``."""
    na, nb = nibbles(a_codes), nibbles(b_codes)
    diff = na != nb
    neg_zero = diff & ((na | nb) == 8) & ((na == 0) | (nb == 0))
    zero_a = ((na.reshape(*na.shape[:-1], -1, GROUP) & 7) == 0).all(dim=-1)
    zero_b = ((nb.reshape(*nb.shape[:-1], -1, GROUP) & 7) == 0).all(dim=-1)
    sdiff = a_scales != b_scales
    return {
        "elements": int(diff.sum()),
        "neg_zero": int(neg_zero.sum()),
        "scales": int(sdiff.sum()),
        "zero_group_scales": int((sdiff & zero_a & zero_b).sum()),
        "element_count": na.numel(),
        "group_count": a_scales.numel(),
    }


#: groups planted in the variant's BF16 shared ``gate_proj`` (row, first column, amax): all
#: zeros, and groups with ``amax < 2^-124`` (where Quark clamps the scale's log2 at -126)
PLANTED = ((0, 0, 0.0), (1, 0, 2.0**-125), (2, 32, 2.0**-130), (3, 64, 2.0**-124))


def plant_groups(w: torch.Tensor) -> torch.Tensor:
    """``w`` (BF16 ``[out, in]``) with the ``PLANTED`` groups: seeded values scaled to amax."""
    w = w.clone()
    g = torch.Generator().manual_seed(0)
    for row, col, amax in PLANTED:
        v = torch.rand(GROUP, generator=g, dtype=torch.float64) * 2 - 1
        v = v / v.abs().max() * amax
        w[row, col : col + GROUP] = v.to(torch.bfloat16)
    return w


def bf16_shared_variant(src: Path, dst: Path, layer: int) -> Path:
    """``src`` (a Quark export) with layer ``layer``'s block-FP8 shared expert replaced by its
    dequantized values in BF16 and excluded from quantization, as Quark writes a BF16 shared
    expert (e.g. ``quark-hybrid``'s layer 1): vLLM's online shared-expert quantizer takes
    BF16/FP16 only. Its ``gate_proj`` gets the ``PLANTED`` groups."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    prefix = f"model.layers.{layer}.mlp.shared_experts."
    index_path = dst / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    changed = 0
    for shard in sorted(dst.glob("*.safetensors")):
        tensors = load_file(str(shard))
        names = [n for n in tensors if n.startswith(prefix) and n.endswith(".weight")]
        for name in names:
            w, s = tensors[name], tensors.pop(name + "_scale")
            assert w.dtype == torch.float8_e4m3fn, f"{name}: {w.dtype}, not block FP8"
            bn, bk = -(-w.shape[0] // s.shape[0]), -(-w.shape[1] // s.shape[1])
            full = s.repeat_interleave(bn, 0)[: w.shape[0]].repeat_interleave(bk, 1)[
                :, : w.shape[1]
            ]
            tensors[name] = (w.float() * full).to(torch.bfloat16)
            if name.endswith("gate_proj.weight"):
                tensors[name] = plant_groups(tensors[name])
            del index["weight_map"][name + "_scale"]
            changed += 1
        if names:
            save_file(tensors, str(shard), metadata={"format": "pt"})
    assert changed == 3, f"layer {layer}: {changed} FP8 shared projections, expected 3"
    index_path.write_text(json.dumps(index, indent=2))
    config_path = dst / "config.json"
    config = json.loads(config_path.read_text())
    qc = config["quantization_config"]
    for proj in ("gate_proj", "up_proj", "down_proj"):
        assert qc["layer_quant_config"].pop(prefix + proj, None) is not None, proj
        qc["exclude"].append(prefix + proj)
    config_path.write_text(json.dumps(config, indent=2))
    return dst
