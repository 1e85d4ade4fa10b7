"""What requantizing a layer's shared expert costs, measured before anything is written.

Per MoE layer:

- ``weight_rel_error``: ``||dq(q(W)) - W|| / ||W||`` over the shared expert's projections
  together (``W`` the source weights dequantized, ``q`` the MXFP4 quantizer, Frobenius norms);
- ``moe_rel_error``: ``||y_q - y|| / ||y||`` of the whole MoE layer's output (routed experts,
  shared expert, routing) on seeded standard-normal activations, through ckpt's runtime
  (``runtime.reference.moe_reference``), with ``y_q`` the same layer but its shared expert
  requantized. Only the routed experts the sampled tokens pick are read.

Example::

    errs = measure_layers(catalog, [1, 2], tokens=64)
    errs[1].weight_rel_error, errs[1].moe_rel_error   # (0.0931, 0.0412)
"""

from __future__ import annotations

from dataclasses import replace

import torch
from pydantic import BaseModel

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.errors import UsageError
from checkpoint_tool.layers.inputs import hidden_states, input_ids, remap_experts, route_tokens
from checkpoint_tool.layers.loader import CheckpointView
from checkpoint_tool.quant.codecs import MxFp4Codec, get_codec
from checkpoint_tool.quant.requant.mxfp4 import quantize_mxfp4
from checkpoint_tool.quant.requant.scheme import MXFP4_SCHEME
from checkpoint_tool.runtime.reference import moe_reference
from checkpoint_tool.runtime.weights import ExpertWeights, Projection

DEFAULT_TOKENS = 16
DEFAULT_SEED = 0


class LayerError(BaseModel):
    """The measured cost of requantizing one layer's shared expert."""

    layer: int
    weight_rel_error: float
    moe_rel_error: float
    tokens: int
    #: the source format(s) of the shared projections, e.g. "unquantized"
    source: str

    def summary(self) -> dict[str, float | int]:
        """Rounded to 4 significant digits (what plans and config.json record)."""
        return {
            "weight_rel_error": float(f"{self.weight_rel_error:.4g}"),
            "moe_rel_error": float(f"{self.moe_rel_error:.4g}"),
            "tokens": self.tokens,
        }


def requantize_projection(p: Projection) -> tuple[Projection, float, float]:
    """``p`` as MXFP4, with ``(||dq(q) - w||^2, ||w||^2)`` of its weight."""
    w = get_codec(p.scheme).dequantize(p.parts).to(torch.float32)
    packed, scales = quantize_mxfp4(w, name=p.label)
    back = MxFp4Codec().dequantize({"weight": packed, "scale": scales})
    err = float((back.double() - w.double()).pow(2).sum())
    ref = float(w.double().pow(2).sum())
    return Projection({"weight": packed, "scale": scales}, MXFP4_SCHEME, p.name), err, ref


def measure_layers(
    catalog: Catalog,
    layers: list[int],
    *,
    tokens: int = DEFAULT_TOKENS,
    seed: int = DEFAULT_SEED,
) -> dict[int, LayerError]:
    """``LayerError`` of each of ``layers`` (MoE layers with a shared expert)."""

    view = CheckpointView(catalog, semantics="producer")
    routing = view.routing()
    out: dict[int, LayerError] = {}
    for n in layers:
        router = view.router(n)
        x = hidden_states(tokens, view.facts.hidden_size, seed, n)
        ids, weights = route_tokens(x, router, routing, input_ids(tokens, router, seed, n))
        used = sorted(set(ids.flatten().tolist()))
        loaded = view.layer(n, experts=used, router=router)
        if not loaded.weights.shared:
            raise UsageError(
                f"{view.where}: layer {n}: no separate shared expert weights to requantize"
            )
        shared, err, ref = [], 0.0, 0.0
        formats = set()
        for e in loaded.weights.shared:
            projs = []
            for p in e.projections():
                q, e2, r2 = requantize_projection(p)
                projs.append(q)
                err, ref = err + e2, ref + r2
                formats.add(p.scheme.format.value)
            shared.append(ExpertWeights(*projs))
        topk = (remap_experts(ids, loaded.slot_of), weights)
        y = moe_reference(x, loaded.weights, routing, topk=topk).double()
        y_q = moe_reference(x, replace(loaded.weights, shared=shared), routing, topk=topk)
        y_norm = float(y.norm())
        diff = float((y_q.double() - y).norm())
        out[n] = LayerError(
            layer=n,
            weight_rel_error=(err / ref) ** 0.5 if ref else 0.0,
            moe_rel_error=diff / y_norm if y_norm else diff,
            tokens=tokens,
            source=",".join(sorted(formats)),
        )
    return out
