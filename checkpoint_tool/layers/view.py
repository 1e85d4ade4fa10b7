"""What the two checkpoint views of ``ckpt verify`` share: config.json facts, routers, gate/up.

``CheckpointView`` (``layers.loader``: a checkpoint read by tensor name) and ``ShardedView``
(``verify.sharded``: a vllm-sharded output read per rank) read the model facts, the routing,
the ``ckpt`` metadata and the recorded FSE slots from config.json alike (``ConfigView``); they
differ in where the tensors come from. Both hand the runtime a ``Router`` and split fused
gate/up projections with ``split_gate_up``; ``engine_w13_global_scale`` is vLLM's w13 rule.

Example::

    view = CheckpointView.open("/out/model")        # or ShardedView.open("/out/r1-tp2", tp=2)
    view.layer_facts(3).n_routed, view.routing().top_k, view.recorded_slots(3)   # (256, 8, [256])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.model import ModelFacts, MoeLayerFacts
from checkpoint_tool.model.config_fields import text_config
from checkpoint_tool.quant.codecs import get_codec
from checkpoint_tool.quant.resolve import load_quant_config
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.runtime.routing import RoutingConfig
from checkpoint_tool.runtime.weights import Projection


@dataclass(frozen=True)
class Router:
    """A layer's router: float32 weight ``[n_routed, H]``, optional correction bias ``[n_routed]``,
    Qwen shared-expert gate ``[1, H]`` and DeepSeek-V4 hash table ``[vocab, top_k]`` (int64)."""

    weight: torch.Tensor
    bias: torch.Tensor | None = None
    shared_gate: torch.Tensor | None = None
    hash_table: torch.Tensor | None = None


class ConfigView:
    """A checkpoint's config.json as verify reads it: text and quantization config, model facts,
    routing. Subclasses pass the parsed config up and define ``where`` and ``facts``."""

    #: layers are whole (the runtime slices them per TP rank); ``ShardedView`` holds rank slices
    presliced = False

    def __init__(
        self, config: dict[str, Any], *, where: str, hf_quant_config: dict | None = None
    ) -> None:
        self.config = config
        self.text_config = text_config(config)
        self.qconfig = load_quant_config(config, hf_quant_config, where=where)
        self._scheme_cache: dict[str | tuple[str, str], Scheme] = {}

    @property
    def where(self) -> str:
        """The checkpoint's place, for messages, e.g. ``"/out/model"``."""
        raise NotImplementedError

    @property
    def facts(self) -> ModelFacts:
        """The model facts (``facts.moe_layer_indices`` -> ``[1, 2, 3]``)."""
        raise NotImplementedError

    def layer_facts(self, layer: int) -> MoeLayerFacts:
        lf = self.facts.layer(layer)
        if lf is None:
            raise InputError(
                f"{self.where}: layer {layer} is not a MoE layer (MoE layers: "
                f"{_ranges(self.facts.moe_layer_indices)}); pick --layers among them"
            )
        return lf

    def routing(self) -> RoutingConfig:
        return RoutingConfig.from_hf_config(self.text_config, source=f"{self.where}/config.json")

    def ckpt_metadata(self) -> dict[str, Any]:
        """``config.json["ckpt"]`` written by ``ckpt convert`` (empty for other checkpoints)."""
        meta = self.config.get("ckpt")
        return meta if isinstance(meta, dict) else {}

    def recorded_slots(self, layer: int) -> list[int] | None:
        """FSE slots ``ckpt convert`` recorded for ``layer`` (None when nothing is recorded)."""
        slots = self.ckpt_metadata().get("fse_slots")
        if not isinstance(slots, dict):
            return None
        return [int(s) for s in slots.get(str(layer), [])]


def engine_w13_global_scale(gate: Projection, up: Projection) -> Projection:
    """``up`` as vLLM runs a routed NVFP4 expert: with the gate's (w1's) global scale.

    vLLM stacks w1 / w3 into one ``w13`` and keeps one global scale per expert,
    ``w13_weight_scale_2[:, 0]`` (w1's), warning "w1_weight_scale_2 must match
    w3_weight_scale_2" when they differ (vLLM 0.33 ``quantization/quark/quark_moe.py``
    ``QuarkNvfp4MoEMethod.process_weights_after_loading``; ``quantization/modelopt.py``
    ``ModelOptNvFp4FusedMoE.process_weights_after_loading`` does the same). So a checkpoint
    whose w3 global scale differs from w1's computes other numbers in vLLM than its producer
    meant, and the numeric check sees it.
    """
    g_global, u_global = gate.parts.get("global_scale"), up.parts.get("global_scale")
    if g_global is None or u_global is None or "global_scale" not in up.parts:
        return up
    return Projection({**up.parts, "global_scale": g_global}, up.scheme, up.name)


def split_gate_up(proj: Projection) -> tuple[Projection, Projection]:
    """gate rows ``[0, I)`` and up rows ``[I, 2I)`` of a fused ``gate_up`` projection."""
    rows = proj.out_features
    if rows % 2:
        raise InputError(f"{proj.label}: fused gate_up has an odd number of rows ({rows})")
    codec = get_codec(proj.scheme)
    half = rows // 2
    gate = codec.slice(proj.parts, -2, 0, half)
    up = codec.slice(proj.parts, -2, half, rows)
    return (
        Projection(gate, proj.scheme, f"{proj.label}[gate]"),
        Projection(up, proj.scheme, f"{proj.label}[up]"),
    )


def _ranges(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values[:12]) + ("..." if len(values) > 12 else "")
