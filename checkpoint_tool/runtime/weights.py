"""The runtime's input: one MoE layer as checkpoint storage tensors plus a Scheme per projection.

A ``Projection`` is one linear (``[out, in]`` logical) as stored: role -> tensor
(``"weight"``, ``"scale"``, NVFP4 ``"global_scale"``), exactly as the codecs define the roles
(CODEC_API.md), and the ``Scheme`` that says how to decode them. An ``ExpertWeights`` is the
gate / up / down triple of one expert. ``MoeLayerWeights`` is the layer:

- ``experts``: routed experts ``0 .. n_routed-1``, then ``n_fused_shared`` shared experts as
  *fused slots* ``n_routed + j`` (the FSE layout: always selected, weight 1);
- ``shared``: shared experts kept separate (the usual layout), each added with weight 1
  (times ``sigmoid(x @ shared_gate_weight^T)`` for Qwen-style gated shared experts);
- ``router_weight`` ``[n_routed, H]`` and the optional ``e_score_correction_bias`` ``[n_routed]``;
- DeepSeek-V4: ``hash_table`` ``[vocab, top_k]`` (``ffn.gate.tid2eid`` of a hash-routed layer)
  and ``swiglu_limit`` (the activation clamp of every expert, routed and shared, see
  ``reference.swiglu``).

DeepSeek-V4 storage, as vLLM 0.33 reads it: FP4 experts (``expert_dtype: "fp4"``) are MXFP4,
two E2M1 codes per I8/U8 byte with an F8_E8M0 scale per 32 inputs
(``models/deepseek_v4/quant_config.py`` ``DeepseekV4FP8Config.get_quant_method`` ->
``Mxfp4MoEMethod``); block-FP8 linears and shared experts carry ue8m0 (E8M0) block scales, the
byte as a float32 exponent (``quantization/utils/fp8_utils.py`` ``_upcast_e8m0_to_fp32``);
Quark NVFP4 exports add ``weight_scale_2`` (role ``global_scale``) and ``input_scale`` ->
``input_scale_2`` (``amd/model.py`` ``_make_deepseek_v4_weights_mapper``), an activation
scale the W4A16 runtime does not use. vLLM passes ``activation_key=kMxfp8Dynamic`` to the
MXFP4 method; the runtime (and the reference) run W4A16, as on Hopper.

Example (a DeepSeek-V3 layer, MXFP4 experts, shared expert separate)::

    scheme = Scheme(format="mxfp4", group_size=32, scale_suffix="weight_scale")
    proj = Projection({"weight": w_u8 [2048, 3584], "scale": s_u8 [2048, 224]}, scheme)
    layer = MoeLayerWeights(experts=[ExpertWeights(gate, up, down), ...],   # 256
                            shared=[ExpertWeights(...)], router_weight=w [256, 7168],
                            e_score_correction_bias=b [256])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.scheme import Scheme, WeightFormat

#: formats whose weight packs two FP4 values per byte along the input dim
FP4_FORMATS = (WeightFormat.MXFP4, WeightFormat.NVFP4)
#: formats the runtime can run (grouped GEMM and reference)
RUNTIME_FORMATS = (
    WeightFormat.UNQUANTIZED,
    WeightFormat.FP8_BLOCK,
    WeightFormat.FP8_PER_CHANNEL,
    WeightFormat.FP8_PER_TENSOR,
    WeightFormat.MXFP4,
    WeightFormat.NVFP4,
    WeightFormat.INT4,
)
#: logical input values per stored weight element, by format (INT4: eight per I32 word)
PACKING = {WeightFormat.MXFP4: 2, WeightFormat.NVFP4: 2, WeightFormat.INT4: 8}


@dataclass(frozen=True)
class Projection:
    """One linear's storage tensors by role, and the Scheme that decodes them."""

    parts: dict[str, torch.Tensor]
    scheme: Scheme
    #: for error messages: the checkpoint module name, e.g. "model.layers.3.mlp.experts.0.up_proj"
    name: str = ""

    def __post_init__(self) -> None:
        if "weight" not in self.parts:
            raise InputError(f"{self.label}: no 'weight' tensor among roles {sorted(self.parts)}")
        if self.parts["weight"].dim() != 2:
            raise InputError(
                f"{self.label}: weight must be 2-D [out, in], got shape "
                f"{tuple(self.parts['weight'].shape)}"
            )
        if self.scheme.format not in RUNTIME_FORMATS:
            raise InputError(
                f"{self.label}: format {self.scheme.format.value} is not supported by the "
                "runtime (bf16/f16/f32, fp8 block/channel/tensor, mxfp4, nvfp4, int4)"
            )

    @property
    def label(self) -> str:
        return self.name or "projection"

    @property
    def format(self) -> WeightFormat:
        return self.scheme.format

    @property
    def weight(self) -> torch.Tensor:
        return self.parts["weight"]

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])

    @property
    def in_features(self) -> int:
        """Logical input width (two FP4 values per stored byte, eight INT4 per I32 word)."""
        return int(self.weight.shape[1]) * PACKING.get(self.format, 1)

    @property
    def logical_shape(self) -> tuple[int, int]:
        """``(out, in)`` as the model sees it: ``(256, 128)`` for FP4 stored ``[256, 64]``."""
        return (self.out_features, self.in_features)

    def to(self, device: torch.device | str) -> Projection:
        parts = {role: t.to(device) for role, t in self.parts.items()}
        return Projection(parts, self.scheme, self.name)


@dataclass(frozen=True)
class ExpertWeights:
    """gate ``[I, H]``, up ``[I, H]``, down ``[H, I]`` of one expert."""

    gate: Projection
    up: Projection
    down: Projection

    def __post_init__(self) -> None:
        g, u, d = self.gate, self.up, self.down
        if u.logical_shape != g.logical_shape:
            raise InputError(
                f"{u.label}: up shape {list(u.logical_shape)} differs from gate "
                f"{list(g.logical_shape)}"
            )
        if d.logical_shape != g.logical_shape[::-1]:
            raise InputError(
                f"{d.label}: down shape {list(d.logical_shape)} does not match gate "
                f"{list(g.logical_shape)} (expected [H, I])"
            )

    @property
    def intermediate(self) -> int:
        return self.gate.out_features

    @property
    def hidden(self) -> int:
        return self.gate.in_features

    def projections(self) -> tuple[Projection, Projection, Projection]:
        return (self.gate, self.up, self.down)

    def map(self, fn: Callable[[Projection], Projection]) -> ExpertWeights:
        return ExpertWeights(fn(self.gate), fn(self.up), fn(self.down))


@dataclass(frozen=True)
class MoeLayerWeights:
    """One MoE layer: routed experts (+ fused shared slots), separate shared experts, router."""

    experts: Sequence[ExpertWeights]
    router_weight: torch.Tensor
    e_score_correction_bias: torch.Tensor | None = None
    shared: Sequence[ExpertWeights] = field(default_factory=tuple)
    #: the last ``n_fused_shared`` entries of ``experts`` are shared experts (slots n_routed + j)
    n_fused_shared: int = 0
    #: Qwen-style shared expert gate ``[1, H]``: shared output times sigmoid(x @ gate^T)
    shared_gate_weight: torch.Tensor | None = None
    #: for error messages, e.g. "model.layers.3.mlp"
    name: str = "moe layer"
    #: DeepSeek-V4 hash-routed layer: experts of token id t are ``hash_table[t]`` ([vocab, k])
    hash_table: torch.Tensor | None = None
    #: DeepSeek-V4 ``swiglu_limit``: gate clamped to <= limit, up to [-limit, limit]
    swiglu_limit: float | None = None

    def __post_init__(self) -> None:
        if not self.experts:
            raise InputError(f"{self.name}: no experts")
        if not 0 <= self.n_fused_shared < len(self.experts):
            raise InputError(
                f"{self.name}: n_fused_shared {self.n_fused_shared} must leave at least one "
                f"routed expert among {len(self.experts)}"
            )
        hidden = self.experts[0].hidden
        for ex in (*self.experts, *self.shared):
            if ex.hidden != hidden:
                raise InputError(
                    f"{ex.gate.label}: hidden size {ex.hidden} differs from the layer's {hidden}"
                )
        if tuple(self.router_weight.shape) != (self.n_routed, hidden):
            raise InputError(
                f"{self.name}: router weight shape {tuple(self.router_weight.shape)} != "
                f"[n_routed={self.n_routed}, hidden={hidden}]"
            )
        bias = self.e_score_correction_bias
        if bias is not None and tuple(bias.shape) != (self.n_routed,):
            raise InputError(
                f"{self.name}: e_score_correction_bias shape {tuple(bias.shape)} != "
                f"[{self.n_routed}]"
            )
        if self.hash_table is not None and self.hash_table.dim() != 2:
            raise InputError(
                f"{self.name}: hash table (tid2eid) shape {tuple(self.hash_table.shape)} is not "
                "[vocab, top_k]"
            )
        if self.swiglu_limit is not None and not self.swiglu_limit > 0:
            raise InputError(f"{self.name}: swiglu_limit {self.swiglu_limit} must be > 0")

    @property
    def n_routed(self) -> int:
        return len(self.experts) - self.n_fused_shared

    @property
    def hidden(self) -> int:
        return self.experts[0].hidden

    @property
    def routed(self) -> Sequence[ExpertWeights]:
        return self.experts[: self.n_routed]

    @property
    def fused_shared(self) -> Sequence[ExpertWeights]:
        return self.experts[self.n_routed :]

    def to(self, device: torch.device | str) -> MoeLayerWeights:
        """A copy with every tensor on ``device``."""

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return MoeLayerWeights(
            experts=[ex.map(lambda p: p.to(device)) for ex in self.experts],
            router_weight=self.router_weight.to(device),
            e_score_correction_bias=move(self.e_score_correction_bias),
            shared=[ex.map(lambda p: p.to(device)) for ex in self.shared],
            n_fused_shared=self.n_fused_shared,
            shared_gate_weight=move(self.shared_gate_weight),
            name=self.name,
            hash_table=self.hash_table,
            swiglu_limit=self.swiglu_limit,
        )

    def with_experts(
        self, experts: Sequence[ExpertWeights], shared: Sequence[ExpertWeights]
    ) -> MoeLayerWeights:
        """The same layer (router, bias, gate) over other expert tensors (e.g. one TP rank's)."""
        return MoeLayerWeights(
            experts=list(experts),
            router_weight=self.router_weight,
            e_score_correction_bias=self.e_score_correction_bias,
            shared=list(shared),
            n_fused_shared=self.n_fused_shared,
            shared_gate_weight=self.shared_gate_weight,
            name=self.name,
            hash_table=self.hash_table,
            swiglu_limit=self.swiglu_limit,
        )
