"""Model-level facts: which layers are MoE, their expert counts and sizes, and checkpoint names.

``ModelFacts`` is what the policy needs to know about a model before looking at any scheme:
the MoE layers (MTP layers included, flagged ``is_mtp``), routed and shared expert counts,
intermediate sizes, and how each layer's expert projections are named on disk.

Example (DeepSeek-R1, layer 3)::

    MoeLayerFacts(layer=3, prefix="model.layers.3.mlp", is_mtp=False, n_routed=256,
                  n_shared=1, moe_intermediate_size=2048, shared_intermediate_size=2048,
                  top_k=8, naming=ExpertNaming())
    .routed_module(5, "gate")   # "model.layers.3.mlp.experts.5.gate_proj"
    .shared_module("down")      # "model.layers.3.mlp.shared_experts.down_proj"
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

Proj = Literal["gate", "up", "down"]
PROJS: tuple[Proj, ...] = ("gate", "up", "down")

#: How routed experts are stored: one module per expert and projection
#: (``experts.E.gate_proj``), one module per expert with gate and up fused
#: (``experts.E.gate_up_proj`` [2I, H]), or 3-D tensors for all experts
#: (``experts.gate_up_proj`` [E, 2I, H] and ``experts.down_proj`` [E, H, I]).
RoutedLayout = Literal["per_expert", "per_expert_gate_up", "fused_3d"]

#: How 3-D fused experts order their last two dims: ``out_in`` as a linear's weight
#: (``gate_up_proj`` [E, 2I, H], ``down_proj`` [E, H, I]: Quark's and transformers' MoE
#: modules) or ``in_out`` (``gate_up_proj`` [E, H, 2I], ``down_proj`` [E, I, H]: Llama-4,
#: whose vLLM loader transposes them, ``llama4.py`` ``load_moe_expert_weights``).
Fused3dOrder = Literal["out_in", "in_out"]

#: How the shared expert is stored: one MLP (``shared_experts.gate_proj``; with n_shared > 1
#: it is one MLP of width n_shared x I, as Quark writes it), one MLP per shared expert
#: (``shared_experts.J.gate_proj``), or one MLP with gate and up fused (``gate_up_proj``).
SharedLayout = Literal["single", "indexed", "single_gate_up"]

HF_PROJ_NAMES: dict[str, str] = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
W_PROJ_NAMES: dict[str, str] = {"gate": "w1", "up": "w3", "down": "w2"}


class ExpertNaming(BaseModel):
    """Checkpoint spelling of one layer's expert projections."""

    model_config = ConfigDict(frozen=True)

    #: projection -> module leaf name, e.g. {"gate": "gate_proj", ...} or {"gate": "w1", ...}
    proj_names: dict[str, str] = Field(default_factory=lambda: dict(HF_PROJ_NAMES))
    routed_layout: RoutedLayout = "per_expert"
    #: leaf name of the fused gate+up projection (per-expert fused or 3-D fused layouts)
    gate_up_name: str = "gate_up_proj"
    #: "shared_experts" (DeepSeek, GLM, DSV4) or "shared_expert" (Qwen, singular)
    shared_name: str = "shared_experts"
    shared_layout: SharedLayout = "single"
    #: leaf of the router under the MoE block (``mlp.gate``; Llama-4 ``feed_forward.router``)
    router_name: str = "gate"
    #: the router's correction bias under the MoE block where it is not beside the router
    #: (ERNIE-4.5: ``moe_statics.e_score_correction_bias``, ``[1, n_routed]``); None: the
    #: router's own ``e_score_correction_bias`` / ``bias``, or the block's
    router_bias: str | None = None
    #: dim order of 3-D fused experts (see ``Fused3dOrder``)
    fused_3d_order: Fused3dOrder = "out_in"
    #: 3-D fused experts stored as several tensors, the weight ``{param}_{suffix}`` (gpt-oss:
    #: ``experts.gate_up_proj_blocks``, with ``_scales`` and ``_bias``); None: the tensor is
    #: the parameter itself (``experts.gate_up_proj``)
    fused_3d_weight: str | None = None
    #: the shared expert's own leaf names where they differ from the routed ones (MiniMax-M3:
    #: routed ``experts.E.w1``, shared ``shared_experts.gate_proj``); None: ``proj_names``
    shared_proj_names: dict[str, str] | None = None
    #: parameter suffix of the routed experts' stored weight: ``weight``, or ``weight_packed``
    #: (compressed-tensors ``pack-quantized`` / ``nvfp4-pack-quantized``)
    weight_suffix: str = "weight"

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        """The default ``weight_suffix`` is left out of dumps (the facts of every checkpoint
        without packed weights read as before it existed)."""
        data = handler(self)
        if isinstance(data, dict) and data.get("weight_suffix") == "weight":
            del data["weight_suffix"]
        return data

    def inter_axis(self, proj: str, *, three_d: bool = False) -> int:
        """The axis of a stored weight holding the intermediate size: gate/up are
        ``[..., I, H]`` and down ``[..., H, I]``; the other way round for ``in_out`` 3-D
        fused experts (``three_d``)."""
        flip = three_d and self.fused_3d_order == "in_out"
        return (-2 if flip else -1) if proj == "down" else (-1 if flip else -2)

    def hidden_axis(self, proj: str, *, three_d: bool = False) -> int:
        """The axis holding ``hidden_size`` (the other of the last two)."""
        return -3 - self.inter_axis(proj, three_d=three_d)

    def intermediate_dim(self, proj: str, logical: tuple[int, ...], *, fused_gate_up: bool) -> int:
        """Width of one expert in a stored weight's logical shape (``inter_axis``; a fused
        gate_up holds two widths)."""
        got = logical[self.inter_axis(proj, three_d=len(logical) == 3)]
        return got // 2 if fused_gate_up and proj != "down" else got


class MoeLayerFacts(BaseModel):
    """One MoE layer: counts, sizes and names. ``layer`` is the global index (MTP = N + k)."""

    model_config = ConfigDict(frozen=True)

    layer: int
    prefix: str
    is_mtp: bool = False
    n_routed: int
    n_shared: int = 0
    moe_intermediate_size: int
    shared_intermediate_size: int = 0
    top_k: int = 0
    #: Qwen-style sigmoid gate on the shared expert output (``mlp.shared_expert_gate``)
    has_shared_expert_gate: bool = False
    naming: ExpertNaming = Field(default_factory=ExpertNaming)

    @property
    def routed_prefix(self) -> str:
        """Module prefix of the routed experts, e.g. ``model.layers.3.mlp.experts``."""
        return f"{self.prefix}.experts"

    @property
    def shared_prefix(self) -> str | None:
        """Module prefix of the shared expert(s), or None when the layer has none."""
        if self.n_shared <= 0:
            return None
        return f"{self.prefix}.{self.naming.shared_name}"

    def proj_name(self, proj: Proj) -> str:
        return self.naming.proj_names[proj]

    def shared_proj_name(self, proj: Proj) -> str:
        return (self.naming.shared_proj_names or self.naming.proj_names)[proj]

    def routed_module(self, e: int, proj: Proj) -> str:
        """Module owning routed expert ``e``'s projection ``proj``.

        Per-expert layouts: ``{prefix}.experts.{e}.gate_proj`` (or ``.w1``); fused gate+up:
        ``{prefix}.experts.{e}.gate_up_proj`` for gate and up. With 3-D fused experts the
        module is ``{prefix}.experts`` itself (its params ``gate_up_proj``/``down_proj``).
        """
        layout = self.naming.routed_layout
        if layout == "fused_3d":
            return self.routed_prefix
        if layout == "per_expert_gate_up" and proj != "down":
            return f"{self.routed_prefix}.{e}.{self.naming.gate_up_name}"
        return f"{self.routed_prefix}.{e}.{self.proj_name(proj)}"

    def routed_weight(self, e: int, proj: Proj) -> str:
        """Tensor name of the weight holding routed expert ``e``'s ``proj`` (see routed_module).

        3-D fused experts have no ``.weight`` suffix: ``model.layers.1.mlp.experts.gate_up_proj``.
        """
        if self.naming.routed_layout == "fused_3d":
            leaf = self.proj_name("down") if proj == "down" else self.naming.gate_up_name
            suffix = self.naming.fused_3d_weight
            return f"{self.routed_prefix}.{leaf}" + (f"_{suffix}" if suffix else "")
        return f"{self.routed_module(e, proj)}.{self.naming.weight_suffix}"

    def fused_3d_param(self, proj: Proj) -> str:
        """The module of a 3-D fused expert parameter: ``{prefix}.experts.gate_up_proj`` (its
        weight is that tensor, or gpt-oss's ``..._blocks``, see ``routed_weight``)."""
        leaf = self.proj_name("down") if proj == "down" else self.naming.gate_up_name
        return f"{self.routed_prefix}.{leaf}"

    def shared_module(self, proj: Proj, j: int | None = None) -> str:
        """Module of the shared expert projection; ``j`` only for indexed shared experts.

        ``model.layers.3.mlp.shared_experts.gate_proj`` / Qwen
        ``model.layers.3.mlp.shared_expert.gate_proj`` / DSV4 ``layers.3.ffn.shared_experts.w1``.
        """
        base = self.shared_prefix
        if base is None:
            raise ValueError(f"layer {self.layer} ({self.prefix}) has no shared experts")
        if self.naming.shared_layout == "indexed":
            base = f"{base}.{0 if j is None else j}"
        if self.naming.shared_layout == "single_gate_up" and proj != "down":
            return f"{base}.{self.naming.gate_up_name}"
        return f"{base}.{self.shared_proj_name(proj)}"

    def shared_modules(self) -> list[str]:
        """Every distinct shared projection module of the layer, in a stable order."""
        if self.shared_prefix is None:
            return []
        js: list[int | None] = (
            list(range(self.n_shared)) if self.naming.shared_layout == "indexed" else [None]
        )
        out: list[str] = []
        for j in js:
            for proj in PROJS:
                m = self.shared_module(proj, j)
                if m not in out:
                    out.append(m)
        return out

    @property
    def shared_chunk_size(self) -> int:
        """Width of one shared expert (each becomes one routed slot under FSE)."""
        if self.n_shared <= 0:
            return 0
        return self.shared_intermediate_size // self.n_shared


class ModelFacts(BaseModel):
    """What config.json (and tensor names) say about a model's MoE structure."""

    model_config = ConfigDict(frozen=True)

    #: a row of the family table (``families_data/families.yaml``) or ``"generic"``
    family: str
    model_type: str | None = None
    hidden_size: int
    num_hidden_layers: int
    num_mtp_layers: int = 0
    #: DeepSeek-V4 ``expert_dtype`` ("fp4" | "fp8"): the routed experts' storage per config.json
    expert_dtype: str | None = None
    moe_layers: list[MoeLayerFacts] = Field(default_factory=list)
    #: how the facts were obtained when the config alone did not say (generic fallback)
    notes: list[str] = Field(default_factory=list)
    #: the config.json key stating the routed experts' width (the family's
    #: ``keys.moe_intermediate_size``: MiniMax's ``intermediate_size``); a padded output
    #: writes its padded width there
    width_key: str = Field(default="moe_intermediate_size", exclude=True)
    #: the key stating a separate shared-expert width (Qwen's
    #: ``shared_expert_intermediate_size``); None: the shared MLP is n_shared routed widths
    shared_width_key: str | None = Field(default=None, exclude=True)
    #: why the family's vLLM model never fuses shared experts (None: it may, per layer gate)
    fse_unsupported: str | None = Field(default=None, exclude=True)

    def layer(self, index: int) -> MoeLayerFacts | None:
        for m in self.moe_layers:
            if m.layer == index:
                return m
        return None

    @property
    def moe_layer_indices(self) -> list[int]:
        return [m.layer for m in self.moe_layers]
