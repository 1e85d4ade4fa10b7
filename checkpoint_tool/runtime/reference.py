"""The oracle: a plain per-expert loop on float32 dequantized weights, computed in float64.

Weights are decoded by the codecs (``get_codec(scheme).dequantize``), never by the runtime's
kernels. Fused shared slots and separate shared experts are both computed here as separate
shared experts (weight 1, times the Qwen shared gate when present), so comparing
``run_moe`` on a fused layout against this reference checks the slot weight too.

Block-FP8 projections whose scheme has dynamic activations (w8a8) see their input quantized
per token and 128-column group, exactly as the runtime does (``activation.py``); FP4 formats
run weight-only (W4A16), as vLLM does on Hopper.

DeepSeek-V4 layers (``layer.swiglu_limit``) clamp the activation of every expert, routed,
fused slot and shared alike (``swiglu``); hash-routed layers (``layer.hash_table``) route by
``input_ids``. gpt-oss layers add each projection's bias (``Projection.bias``), the router's
bias (``layer.router_bias``) and run ``swigluoai`` (``layer.activation``).

Example::

    y = moe_reference(x, layer, RoutingConfig(top_k=8, ...))   # float32 [T, H]
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.codecs import get_codec
from checkpoint_tool.runtime.activation import (
    dequantize_per_token_group,
    quantize_per_token_group,
)
from checkpoint_tool.runtime.routing import RoutingConfig, route
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights, Projection

Dequantizer = Callable[[Projection], torch.Tensor]
TopK = tuple[torch.Tensor, torch.Tensor]


def dequantize_projection(proj: Projection) -> torch.Tensor:
    """float32 ``[out, in]`` of a projection, decoded by ``checkpoint_tool.quant.codecs``."""
    w = get_codec(proj.scheme).dequantize(proj.parts)
    expected = proj.logical_shape
    if tuple(w.shape) != expected:
        raise InputError(f"{proj.label}: decoded shape {tuple(w.shape)} != expected {expected}")
    return w.float()


def uses_w8a8(proj: Projection, w8a8: bool | None = None) -> bool:
    """Whether the input of ``proj`` is quantized to FP8 per token-group (a format with ``w8a8``: block FP8).

    ``w8a8=None`` follows the scheme (dynamic activations -> yes); True/False force it.
    """
    return proj.fmt.runs_w8a8(proj.scheme, w8a8)


def shared_weight(x: torch.Tensor, layer: MoeLayerWeights) -> torch.Tensor:
    """float32 ``[T]`` multiplier of every shared expert (1, or the Qwen sigmoid gate)."""
    if layer.shared_gate_weight is None:
        return torch.ones(x.shape[0], dtype=torch.float32, device=x.device)
    gate = layer.shared_gate_weight.float().to(x.device).reshape(1, -1)
    return torch.sigmoid(x.float() @ gate.t()).reshape(-1)


def moe_reference(
    x: torch.Tensor,
    layer: MoeLayerWeights,
    routing: RoutingConfig,
    *,
    topk: TopK | None = None,
    w8a8: bool | None = None,
    dequantize: Dequantizer | None = None,
    input_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """float32 ``[T, H]`` output of the layer for ``x [T, H]``.

    ``topk`` (ids, weights) overrides the routing (to compare backends on one routing);
    ``dequantize`` overrides the codec decoder (tests of the decoders themselves);
    ``input_ids`` ``[T]`` feed a hash-routed layer's table.
    """
    deq = dequantize or dequantize_projection

    def expert(a: torch.Tensor, ex: ExpertWeights) -> torch.Tensor:
        """float64 ``down(swiglu(gate(a), up(a)))`` of one expert on float32 rows ``a``."""
        wg, wu, wd = (deq(p).double().to(a.device) for p in ex.projections())
        a_in = _activation(a, ex.gate, w8a8)
        g = _biased(a_in @ wg.t(), ex.gate)
        u = _biased(a_in @ wu.t(), ex.up)
        h = swiglu(g, u, layer.swiglu_limit, layer.activation)
        return _biased(_activation(h.float(), ex.down, w8a8) @ wd.t(), ex.down)

    if topk is None:
        topk = route_layer(x, layer, routing, input_ids)
    ids, weights = topk
    x32 = x.float()
    out = torch.zeros(x.shape[0], layer.hidden, dtype=torch.float64, device=x.device)
    for e in range(layer.n_routed):
        rows, slots = (ids == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        y = expert(x32[rows], layer.experts[e])
        out.index_add_(0, rows, y * weights[rows, slots].double().unsqueeze(-1))
    gate = shared_weight(x, layer).double().unsqueeze(-1)
    for ex in (*layer.fused_shared, *layer.shared):
        out += expert(x32, ex) * gate
    return out.float()


def route_layer(
    x: torch.Tensor,
    layer: MoeLayerWeights,
    routing: RoutingConfig,
    input_ids: torch.Tensor | None = None,
) -> TopK:
    """The layer's own routing: its router, bias and (hash layers) its table."""
    return route(
        x,
        layer.router_weight,
        routing,
        layer.e_score_correction_bias,
        input_ids=input_ids,
        hash_table=layer.hash_table,
        router_bias=layer.router_bias,
    )


#: gpt-oss's swigluoai constants (vLLM ``SwigluOAIAndMul.__init__`` defaults, which
#: ``gpt_oss.py`` ``MLPBlock`` keeps: it passes only ``activation="swigluoai"``)
SWIGLUOAI_ALPHA = 1.702
SWIGLUOAI_LIMIT = 7.0


def swiglu(
    gate: torch.Tensor,
    up: torch.Tensor,
    limit: float | None = None,
    activation: str = "silu",
) -> torch.Tensor:
    """``silu(gate) * up``; with DeepSeek-V4's ``swiglu_limit`` the inputs are clamped first.

    ``activation="swigluoai"`` (gpt-oss): vLLM 0.33 ``model_executor/layers/activation.py``
    ``SwigluOAIAndMul.forward_native``: ``gate = clamp(gate, max=limit)``,
    ``up = clamp(up, -limit, limit)``, ``gate * sigmoid(alpha * gate) * (up + 1)`` with
    alpha 1.702 and limit 7.0 (``limit`` None: 7.0). Its input is the interleaved
    ``[g0, u0, g1, u1, ...]`` row order of gpt-oss's ``gate_up_proj`` (``MoEActivation.SWIGLUOAI``,
    ``fused_moe/activation.py``); here gate and up arrive already apart.

    vLLM 0.33 ``model_executor/layers/activation.py`` ``SiluAndMulWithClamp.forward_native``:
    ``gate = clamp(gate, max=limit)``, ``up = clamp(up, -limit, limit)`` (alpha 1, beta 0),
    used by ``models/deepseek_v4/amd/model.py`` ``DeepseekV4MLP`` (shared experts) and passed
    as ``swiglu_limit`` to the routed ``FusedMoE`` of ``DeepseekV4MoE`` (shared and routed
    experts both clamp).
    """
    if activation == "swigluoai":
        lim = SWIGLUOAI_LIMIT if limit is None else limit
        gate = gate.clamp(max=lim)
        up = up.clamp(min=-lim, max=lim)
        return gate * torch.sigmoid(gate * SWIGLUOAI_ALPHA) * (up + 1)
    if limit is not None:
        gate = gate.clamp(max=limit)
        up = up.clamp(min=-limit, max=limit)
    return torch.nn.functional.silu(gate) * up


def _biased(y: torch.Tensor, proj: Projection) -> torch.Tensor:
    """``y + proj.bias`` (in ``y``'s dtype and device) when the projection has a bias."""
    if proj.bias is None:
        return y
    return y + proj.bias.to(y.device, y.dtype)


def _activation(a: torch.Tensor, proj: Projection, w8a8: bool | None) -> torch.Tensor:
    if uses_w8a8(proj, w8a8):
        return dequantize_per_token_group(*quantize_per_token_group(a)).double()
    return a.double()
