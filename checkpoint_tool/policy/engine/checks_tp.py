"""TP-geometry rules: how vLLM splits each MoE layer's expert intermediate over ``--tp``.

vLLM gives each rank ``I // tp`` (``divide`` asserts ``I % tp == 0``); with ``--ep`` the experts
are not TP-split (tp 1 for experts). Per routed scheme:

- block FP8 (DeepSeek ``Fp8Config`` or Quark per_block): the per-rank size must be a multiple
  of ``block_n`` (gate/up rows) and, when tp > 1, of ``block_k`` (down columns) -- the two
  ``ValueError`` messages of ``Fp8MoEMethod.create_weights``;
- MXFP4 / NVFP4: a multiple of the scale group (32 / 16), else weights and scales are narrowed
  out of step (silent); MXFP4 backends further round the per-rank size up
  (``mxfp4_round_up_hidden_size_and_intermediate_size``, values per backend in the target).

Layers with the same geometry are folded into one finding.

Example::

    check_tp(ctx, rules)   # tp=8, I=2048 block FP8 -> no finding; I=1536 -> tp_fp8_block_gate_up
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from checkpoint_tool.quant.scheme import WeightFormat
from checkpoint_tool.quant.storage import round_up, scheme_alignment

from .context import EngineContext
from .model import EngineFinding, RuleSpec

if TYPE_CHECKING:
    from checkpoint_tool.model import MoeLayerFacts
    from checkpoint_tool.quant.scheme import Scheme

TP_RULES = (
    "tp_intermediate_not_divisible",
    "tp_fp8_block_gate_up",
    "tp_fp8_block_down",
    "tp_fp4_group_split",
    "tp_int4_group_split",
    "tp_fp8_block_shared_linear",
    "tp_mxfp4_backend_round_up",
    "tp_moe_backend_unknown",
)


def _routed_scheme(ctx: EngineContext, layer: MoeLayerFacts) -> Scheme | None:
    return ctx.scheme_of(layer.routed_weight(0, "down"))


def _layer_groups(ctx: EngineContext) -> dict[tuple, list[int]]:
    """(size, moe_tp, format, row unit, column unit) -> MoE layer indices.

    The units are the storage codec's alignments of the routed weight's rows (gate/up split:
    ``block_n`` for block FP8) and columns (down split: ``block_k``, the FP4 scale group).
    """
    facts = ctx.facts
    if facts is None:
        return {}
    moe_tp = 1 if ctx.options.ep else max(1, ctx.options.tp)
    groups: dict[tuple, list[int]] = defaultdict(list)
    for layer in facts.moe_layers:
        scheme = _routed_scheme(ctx, layer)
        fmt = scheme.format if scheme is not None else WeightFormat.UNQUANTIZED
        rows = scheme_alignment(scheme, -2) if scheme is not None else 1
        cols = scheme_alignment(scheme, -1) if scheme is not None else 1
        groups[(layer.moe_intermediate_size, moe_tp, fmt, rows, cols)].append(layer.layer)
    return groups


def check_tp(ctx: EngineContext, rules: dict[str, RuleSpec]) -> list[EngineFinding]:
    """Findings of the TP-geometry rules active in ``rules``."""
    out: list[EngineFinding] = []
    backend = ctx.options.moe_backend
    table = ctx.target.mxfp4_round_up
    if backend is not None and backend not in table and "tp_moe_backend_unknown" in rules:
        out.append(
            rules["tp_moe_backend_unknown"].finding(
                backend=backend, expected=sorted(table), target=ctx.target.name
            )
        )
    for (size, tp, fmt, rows, cols), layers in sorted(_layer_groups(ctx).items(), key=str):
        per_rank = size // tp
        p = {"size": size, "tp": tp, "per_rank": per_rank}
        if size % tp:
            if "tp_intermediate_not_divisible" in rules:
                out.append(rules["tp_intermediate_not_divisible"].finding(layers=layers, **p))
            continue
        if fmt is WeightFormat.FP8_BLOCK and not _fp8_refines(ctx, (rows, cols), per_rank):
            if per_rank % rows and "tp_fp8_block_gate_up" in rules:
                out.append(rules["tp_fp8_block_gate_up"].finding(layers=layers, block_n=rows, **p))
            if tp > 1 and per_rank % cols and "tp_fp8_block_down" in rules:
                out.append(rules["tp_fp8_block_down"].finding(layers=layers, block_k=cols, **p))
        if fmt in (WeightFormat.MXFP4, WeightFormat.NVFP4) and not _gpt_oss_split(ctx):
            if per_rank % cols and "tp_fp4_group_split" in rules:
                pad_to = round_up(size, tp * cols)
                out.append(
                    rules["tp_fp4_group_split"].finding(
                        layers=layers,
                        scheme=fmt.value,
                        group=cols,
                        pad_to=pad_to,
                        details={"pad_to": pad_to, "padded_per_rank": pad_to // tp},
                        **p,
                    )
                )
        if fmt is WeightFormat.INT4 and per_rank % cols and "tp_int4_group_split" in rules:
            pad_to = round_up(size, tp * cols)
            out.append(
                rules["tp_int4_group_split"].finding(
                    layers=layers,
                    group=cols,
                    pad_to=pad_to,
                    details={"pad_to": pad_to, "padded_per_rank": pad_to // tp},
                    **p,
                )
            )
        if fmt is WeightFormat.MXFP4 and "tp_mxfp4_backend_round_up" in rules:
            out += _round_up_finding(ctx, rules["tp_mxfp4_backend_round_up"], layers, per_rank)
    if "tp_fp8_block_shared_linear" in rules:
        out += _shared_fp8_block(ctx, rules["tp_fp8_block_shared_linear"])
    return out


def _gpt_oss_split(ctx: EngineContext) -> bool:
    """gpt-oss's MXFP4 loader splits by whole scale groups itself: each rank takes
    ``cdiv(I / 32, tp)`` groups, the last rank fewer (``gpt_oss.py`` ``_load_weights_mxfp4``:
    ``per_rank_intermediate_size_block = cdiv(intermediate_size_block, tp_size)``), so no
    split falls inside a group."""
    from checkpoint_tool.quant.configs import GptOssMxfp4Config

    return isinstance(ctx.qconfig, GptOssMxfp4Config)


def _fp8_refines(ctx: EngineContext, block: tuple[int, int], per_rank: int) -> bool:
    """Does vLLM's ``Fp8Config`` MoE refine the block grid instead of raising?

    ``refine_fp8_moe_block_shape`` (fused_moe/oracle/fp8.py): with the default (auto) MoE
    backend the scales are upsampled to ``gcd(block_n, block_k, I/tp, hidden)`` blocks when
    that is >= 32, so the per-rank size need not be a multiple of 128; below 32
    ``validate_fp8_block_shape_moe`` raises. Quark per-block MoE always validates
    (quark_moe.py), so it never refines.
    """
    from checkpoint_tool.quant.configs import DeepSeekFp8Config

    if not isinstance(ctx.qconfig, DeepSeekFp8Config) or ctx.facts is None:
        return False
    bn, bk = block
    return math.gcd(bn, bk, per_rank, ctx.facts.hidden_size) >= 32


def _shared_fp8_block(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    """Unfused shared experts are MergedColumnParallel gate_up + RowParallel down linears:
    block FP8 needs I/tp to be a multiple of block_n (gate/up) and block_k (down)."""
    facts, tp = ctx.facts, max(1, ctx.options.tp)
    if facts is None or ctx.decision is None:
        return []
    fused = {index for index, layer in ctx.decision.layers.items() if layer.fse.enabled}
    groups: dict[tuple, list[int]] = defaultdict(list)
    for layer in facts.moe_layers:
        if layer.n_shared <= 0 or layer.layer in fused or layer.shared_intermediate_size % tp:
            continue
        per_rank = layer.shared_intermediate_size // tp
        # gate/up: MergedColumnParallelLinear allows a partition that is not a multiple of
        # block_n (allow_fp8_block_shape_mismatch, layers/linear.py), so only the RowParallel
        # down_proj raises (validate_fp8_block_shape, quantization/utils/fp8_utils.py)
        for proj in ("down",):
            scheme = ctx.scheme_of(f"{layer.shared_module(proj, 0)}.weight")
            if scheme is None or scheme.format is not WeightFormat.FP8_BLOCK or not scheme.block:
                continue
            bn, bk = scheme.block
            if proj == "gate" and per_rank % bn:
                key = ("output_partition_size", "block_n", bn, "gate/up rows")
            elif proj == "down" and tp > 1 and per_rank % bk:
                key = ("input_size_per_partition", "block_k", bk, "down columns")
            else:
                continue
            group = (layer.shared_intermediate_size, per_rank, *key)
            groups[group].append(layer.layer)
    return [
        rule.finding(
            layers=layers,
            size=size,
            tp=tp,
            per_rank=per_rank,
            what=what,
            block_name=name,
            block=block,
            proj=proj,
        )
        for (size, per_rank, what, name, block, proj), layers in sorted(groups.items())
    ]


def _round_up_finding(
    ctx: EngineContext, rule: RuleSpec, layers: list[int], per_rank: int
) -> list[EngineFinding]:
    table = dict(ctx.target.mxfp4_round_up)
    backend = ctx.options.moe_backend
    if backend is not None:
        if backend not in table:
            return []
        padded = round_up(per_rank, table[backend])
        if padded == per_rank:
            detail = f"--moe-backend {backend} keeps it (multiple of {table[backend]})"
        else:
            extra = 100.0 * (padded - per_rank) / per_rank
            detail = (
                f"--moe-backend {backend} rounds it up to {padded} (multiple of "
                f"{table[backend]}): {extra:.0f}% more expert weight memory and GEMM work"
            )
        details = {"backend": backend, "padded_per_rank": padded}
    else:
        padded_by = {b: round_up(per_rank, m) for b, m in sorted(table.items())}
        rocm = round_up(per_rank, ctx.target.mxfp4_round_up_rocm_default)
        padding = {b: v for b, v in padded_by.items() if v != per_rank}
        if not padding and rocm == per_rank:
            return []
        parts = [f"{b} {v}" for b, v in padding.items()] + [f"ROCm default {rocm}"]
        detail = "backends pad it to " + ", ".join(parts) + " (pick one with --moe-backend)"
        details = {"padded_per_rank_by_backend": padded_by, "rocm_default": rocm}
    return [rule.finding(layers=layers, per_rank=per_rank, detail=detail, details=details)]


CHECKS: dict[str, Callable[..., list[EngineFinding]]] = {}
