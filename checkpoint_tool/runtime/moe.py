"""Run one MoE layer from checkpoint tensors: routing, align, grouped GEMMs, combine, TP sum.

``run_moe(x, layer, routing, backend="triton", tp=1)``:

1. route (``routing.py``): ids ``[T, k]`` and weights (``routed_scaling_factor`` included);
   (DeepSeek-V4 hash layers: ``layer.hash_table[input_ids]``);
2. fused shared slots ``n_routed + j`` are appended to every token with weight 1 (times the
   Qwen shared gate, if any). Since the scaling factor is applied per *routed* weight, weight 1
   makes the slot exactly the separate shared expert (``y = sum_i rsf * w_i E_i(x) + S(x)``);
3. per TP rank (gate/up rows and down columns sliced by ``shard.py``, padding allowed): align
   rows into blocks, ``gate_up_silu`` (DeepSeek-V4: ``swiglu_limit`` clamp) then ``down_weighted`` (router weight in the epilogue),
   combine by summing ``[T, k, H]`` over k in float32 (fixed order, deterministic); separate
   shared experts run as a second grouped call with every token routed to each of them;
4. sum the ranks' partial outputs in rank order (the all-reduce of row-parallel down).

``backend="torch"`` runs the same steps with a per-expert loop on codec-dequantized weights
(the fallback without Triton, and the GPU baseline of the benchmark). Expert groups with
biases or the ``swigluoai`` activation (gpt-oss) take that loop on either backend: the grouped
Triton kernels have neither a bias epilogue nor swigluoai.

Example::

    prepared = prepare_moe(layer, tp=2)              # stacks kernel tensors once
    y = run_prepared(x, prepared, routing)           # [T, H] in x.dtype
    y = run_moe(x, layer, routing, backend="torch")  # one-shot
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from checkpoint_tool.errors import UsageError
from checkpoint_tool.runtime.activation import (
    dequantize_per_token_group,
    quantize_per_token_group,
)
from checkpoint_tool.runtime.reference import (
    TopK,
    dequantize_projection,
    route_layer,
    shared_weight,
    swiglu,
    uses_w8a8,
)
from checkpoint_tool.runtime.routing import RoutingConfig
from checkpoint_tool.runtime.shard import shard_layer
from checkpoint_tool.runtime.stack import KernelFormat, StackedWeights, stack_projections
from checkpoint_tool.runtime.weights import (
    Activation,
    ExpertWeights,
    MoeLayerWeights,
    Projection,
)

Backend = Literal["triton", "torch"]


@dataclass(frozen=True)
class ExpertGroup:
    """Experts run by one grouped call: their checkpoint tensors and (triton) stacked tensors."""

    experts: Sequence[ExpertWeights]
    gate: StackedWeights | None = None
    up: StackedWeights | None = None
    down: StackedWeights | None = None

    @property
    def stacked(self) -> bool:
        return self.gate is not None


@dataclass(frozen=True)
class RankExperts:
    """One TP rank: routed experts (+ fused shared slots) and separate shared experts."""

    layer: MoeLayerWeights
    routed: ExpertGroup
    shared: ExpertGroup | None


@dataclass(frozen=True)
class PreparedMoe:
    """A layer ready to run: router tensors, and each TP rank's expert groups."""

    layer: MoeLayerWeights
    ranks: Sequence[RankExperts]
    w8a8: bool | None = None
    #: float32 copy of the router weight (the logits are float32; no per-call conversion)
    router_weight: torch.Tensor | None = None


def prepare_moe(
    layer: MoeLayerWeights | Sequence[MoeLayerWeights],
    *,
    tp: int = 1,
    pad_multiple: int = 1,
    w8a8: bool | None = None,
    backend: Backend = "triton",
) -> PreparedMoe:
    """Shard (``tp`` ranks, per-rank intermediate padded to ``pad_multiple``) and stack.

    ``layer`` may also be a sequence of already-sliced rank layers (a TP-sharded checkpoint);
    their router tensors must be the same, the first one's are used.
    """
    if isinstance(layer, MoeLayerWeights):
        if tp < 1:
            raise UsageError(f"tp must be >= 1, got {tp}")
        full = layer
        rank_layers = (
            [layer]
            if tp == 1 and pad_multiple == 1
            else [shard_layer(layer, tp, r, pad_multiple=pad_multiple) for r in range(tp)]
        )
    else:
        rank_layers = list(layer)
        if not rank_layers:
            raise UsageError("prepare_moe: no rank layers given")
        full = rank_layers[0]
    stack = backend == "triton"
    ranks = []
    for rl in rank_layers:
        routed = _group(rl.experts, stack, w8a8)
        shared = _group(rl.shared, stack, w8a8) if rl.shared else None
        ranks.append(RankExperts(rl, routed, shared))
    return PreparedMoe(full, ranks, w8a8, full.router_weight.float())


def run_moe(
    x: torch.Tensor,
    layer: MoeLayerWeights,
    routing: RoutingConfig,
    backend: Backend = "triton",
    tp: int = 1,
    *,
    pad_multiple: int = 1,
    topk: TopK | None = None,
    w8a8: bool | None = None,
    input_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[T, H]`` output (``x.dtype``) of one MoE layer for ``x [T, H]`` (see module doc).

    ``input_ids`` ``[T]``: the tokens, for a hash-routed layer (DeepSeek-V4 ``tid2eid``).
    """
    prepared = prepare_moe(layer, tp=tp, pad_multiple=pad_multiple, w8a8=w8a8, backend=backend)
    return run_prepared(x, prepared, routing, backend=backend, topk=topk, input_ids=input_ids)


def run_prepared(
    x: torch.Tensor,
    prepared: PreparedMoe,
    routing: RoutingConfig,
    *,
    backend: Backend = "triton",
    topk: TopK | None = None,
    configs: object | None = None,
    input_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Forward of a prepared layer; ``topk`` (ids, weights) overrides the routing.

    ``configs`` (a ``kernels.config.MoeConfigs``) overrides the kernel tiles (benchmarks).
    """
    layer = prepared.layer
    if backend == "triton" and not all(r.routed.stacked for r in prepared.ranks):
        raise UsageError("run_prepared: layer was prepared for the torch backend")
    ids, weights = topk if topk is not None else route_layer(x, layer, routing, input_ids)
    ids, weights = ids.to(x.device), weights.to(x.device).float()
    num_tokens = x.shape[0]
    gate = shared_weight(x, layer)
    if layer.n_fused_shared:
        slots = torch.arange(layer.n_routed, len(layer.experts), device=x.device)
        ids = torch.cat([ids, slots.expand(num_tokens, -1)], dim=1)
        weights = torch.cat([weights, gate[:, None].expand(-1, layer.n_fused_shared)], dim=1)
    out = torch.zeros(num_tokens, layer.hidden, dtype=torch.float32, device=x.device)
    run = _GroupRun(backend, prepared.w8a8, configs, layer.swiglu_limit, layer.activation)
    for rank in prepared.ranks:
        out += run(x, rank.routed, ids, weights)
        if rank.shared is not None:
            n_shared = len(rank.shared.experts)
            s_ids = torch.arange(n_shared, device=x.device).expand(num_tokens, -1)
            s_w = gate[:, None].expand(-1, n_shared)
            out += run(x, rank.shared, s_ids, s_w)
    return out.to(x.dtype)


def _group(experts: Sequence[ExpertWeights], stack: bool, w8a8: bool | None) -> ExpertGroup:
    if not stack:
        return ExpertGroup(list(experts))
    first = experts[0]
    in_w8a8 = uses_w8a8(first.gate, w8a8)
    mid_w8a8 = uses_w8a8(first.down, w8a8)
    return ExpertGroup(
        list(experts),
        stack_projections([ex.gate for ex in experts], w8a8=in_w8a8),
        stack_projections([ex.up for ex in experts], w8a8=in_w8a8),
        stack_projections([ex.down for ex in experts], w8a8=mid_w8a8),
    )


@dataclass(frozen=True)
class _GroupRun:
    """How the groups of one forward run: backend, w8a8 override, tiles, activation clamp."""

    backend: Backend
    w8a8: bool | None
    configs: object | None
    swiglu_limit: float | None
    activation: Activation = "silu"

    def __call__(
        self, x: torch.Tensor, group: ExpertGroup, ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """float32 ``[T, H]``: sum over slots of ``weights * expert(x)`` for one expert group."""
        if self.backend not in ("torch", "triton"):
            raise UsageError(f"unknown backend {self.backend!r} (use 'triton' or 'torch')")
        loop = self.activation != "silu" or any(ex.has_bias for ex in group.experts)
        if self.backend == "torch" or loop:
            return _group_torch(
                x, group.experts, ids, weights, self.w8a8, self.swiglu_limit, self.activation
            )
        return _group_triton(x, group, ids, weights, self.configs, self.swiglu_limit)


def _group_triton(
    x: torch.Tensor,
    group: ExpertGroup,
    ids: torch.Tensor,
    weights: torch.Tensor,
    configs: object | None,
    swiglu_limit: float | None = None,
) -> torch.Tensor:
    from checkpoint_tool.runtime.align import align_rows
    from checkpoint_tool.runtime.kernels import (
        INTERPRETED,
        choose_configs,
        down_weighted,
        gate_up_silu,
        quantize_fp8_groups,
    )
    from checkpoint_tool.runtime.kernels.align import MAX_FUSED_ROWS, align_rows_fused

    assert group.gate is not None and group.up is not None and group.down is not None
    num_tokens, top_k = ids.shape
    rows = num_tokens * top_k
    io_dtype = torch.float32 if x.device.type == "cpu" else x.dtype
    cfgs = configs or choose_configs(
        group.gate.fmt,
        group.down.fmt,
        rows=rows,
        num_experts=group.gate.num_experts,
        hidden=group.down.n,
        intermediate=group.gate.n,
        device=x.device,
    )
    fused_align = not INTERPRETED and rows <= MAX_FUSED_ROWS  # decode: one launch
    align = align_rows_fused if fused_align else align_rows
    aligned = align(ids, group.gate.num_experts, cfgs.block_m)
    a, a_scale = _kernel_input(x, group.gate, io_dtype, quantize_fp8_groups)
    # a w8a8 down projection quantizes the float32 intermediate (no bf16 rounding first)
    h_dtype = torch.float32 if group.down.fmt is KernelFormat.FP8_W8A8 else io_dtype
    h = gate_up_silu(
        a,
        a_scale,
        group.gate,
        group.up,
        aligned,
        cfgs.gate_up,
        out_dtype=h_dtype,
        swiglu_limit=swiglu_limit,
    )
    h, h_scale = _kernel_input(h, group.down, io_dtype, quantize_fp8_groups)
    y = down_weighted(
        h, h_scale, group.down, aligned, weights.reshape(-1), cfgs.down, out_dtype=io_dtype
    )
    return y.view(num_tokens, top_k, -1).float().sum(dim=1)


def _kernel_input(
    a: torch.Tensor, w: StackedWeights, io_dtype: torch.dtype, quantize: Callable
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if w.fmt is KernelFormat.FP8_W8A8:
        return quantize(a.contiguous())
    return a.to(io_dtype).contiguous(), None


def _group_torch(
    x: torch.Tensor,
    experts: Sequence[ExpertWeights],
    ids: torch.Tensor,
    weights: torch.Tensor,
    w8a8: bool | None,
    swiglu_limit: float | None = None,
    activation: Activation = "silu",
) -> torch.Tensor:
    """Per-expert loop on dequantized weights (float32 on CPU, ``x.dtype`` on GPU)."""
    dtype = torch.float32 if x.device.type == "cpu" else x.dtype
    out = torch.zeros(x.shape[0], experts[0].hidden, dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        rows, slots = (ids == e).nonzero(as_tuple=True)
        ex = experts[e]
        wg, wu, wd = (dequantize_projection(p).to(x.device, dtype) for p in ex.projections())
        a = _torch_input(x[rows], ex.gate, w8a8, dtype)
        g, u = _plus_bias(a @ wg.t(), ex.gate), _plus_bias(a @ wu.t(), ex.up)
        h = swiglu(g, u, swiglu_limit, activation)
        y = _plus_bias(_torch_input(h, ex.down, w8a8, dtype) @ wd.t(), ex.down)
        out.index_add_(0, rows, y.float() * weights[rows, slots].unsqueeze(-1))
    return out


def _plus_bias(y: torch.Tensor, proj: Projection) -> torch.Tensor:
    return y if proj.bias is None else y + proj.bias.to(y.device, y.dtype)


def _torch_input(
    a: torch.Tensor, proj: Projection, w8a8: bool | None, dtype: torch.dtype
) -> torch.Tensor:
    if uses_w8a8(proj, w8a8):
        return dequantize_per_token_group(*quantize_per_token_group(a)).to(dtype)
    return a.to(dtype)
