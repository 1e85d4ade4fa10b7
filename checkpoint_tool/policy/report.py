"""``PolicyReport``: the per-layer policy of a checkpoint, the JSON of ``ckpt inspect``.

Stable and documented (``docs/inspect.md``, JSON Schema in
``docs/schemas/policy-report.schema.json``). Shape::

    {"model": {"family": "deepseek_v3", "quant_method": "quark", ...},
     "tp": 2, "ep": false, "eplb": false, "all2all": null, "fse_mode": "auto",
     "moe_layers": [{"layer": 3, "prefix": "model.layers.3.mlp",
                     "routed": {"scheme": "mxfp4/32", ...},
                     "shared": {"scheme": "fp8_block[128,128]", ...} | null,
                     "fse": {"enabled": false, "code": "quark_different_configs",
                             "reason": "Quark uses ... at model.layers.3.mlp.shared_experts"},
                     "intermediate": {"size": 160, "per_rank": 80, "padded_per_rank": 96, ...}}],
     "summary": {"fse_enabled_layers": [1, 2], "fse_disabled_layers": [3],
                 "reasons": {"Quark uses ... at model.layers.N.mlp.shared_experts": [3]},
                 "text": "fused shared experts: enabled on MoE layer(s) [1, 2]; ..."},
     "issues": [{"severity": "error", "tensor": "...", "rule": "...", "message": "..."}],
     "engine": {...} | null}     # what --target (default: newest vLLM) will do
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from checkpoint_tool.policy.decision import FseDecision, FseMode, TpGeometry
from checkpoint_tool.policy.engine.model import EngineReport
from checkpoint_tool.report import Issue

#: version of the JSON shape; bump on incompatible changes
SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSummary(_Model):
    """What the model is, as far as the policy is concerned."""

    family: str
    model_type: str | None = None
    hidden_size: int
    num_hidden_layers: int
    num_mtp_layers: int = 0
    num_moe_layers: int
    #: quantization config family: "none" | "deepseek_fp8" | "quark" | "modelopt" | "deepseek_v4"
    quant_method: str
    quant_summary: str = ""
    tensors: int = 0
    files: int = 0
    #: bytes of tensor data described by the headers (never read)
    data_bytes: int = 0
    #: bytes actually read to build the report (headers and JSON side files)
    header_bytes_read: int = 0
    #: bytes received from the server for a remote source (hub, S3), everything included
    bytes_transferred: int | None = None
    notes: list[str] = Field(default_factory=list)


class ExpertSchemes(_Model):
    """The scheme a set of experts (routed, or the shared expert) is stored in."""

    #: compact label, e.g. "mxfp4/32", "fp8_block[128,128]", "unquantized"
    scheme: str
    format: str
    #: the config rule that decided it (vLLM semantics), e.g. "vllm: global_quant_config"
    rule: str = ""
    #: per projection when they differ ("gate"/"up"/"down" -> label), else empty
    per_projection: dict[str, str] = Field(default_factory=dict)
    #: storage layout: per_expert | per_expert_gate_up | fused_3d (routed); single | indexed
    layout: str
    #: module prefix, e.g. "model.layers.3.mlp.experts"
    prefix: str
    count: int
    width: int


class MoeLayerPolicy(_Model):
    """Everything decided for one MoE layer."""

    layer: int
    prefix: str
    is_mtp: bool = False
    n_routed: int
    n_shared: int
    top_k: int = 0
    routed: ExpertSchemes
    shared: ExpertSchemes | None = None
    fse: FseDecision
    #: the routed intermediate (shared chunks included when fused)
    intermediate: TpGeometry
    #: the shared MLP when it stays a separate TP-split linear (not fused); else None
    shared_intermediate: TpGeometry | None = None


class PolicySummary(_Model):
    """The per-layer decisions folded into lists, in the reference engine's words."""

    fse_enabled_layers: list[int] = Field(default_factory=list)
    fse_disabled_layers: list[int] = Field(default_factory=list)
    #: layers without shared experts (FSE does not apply)
    fse_not_applicable_layers: list[int] = Field(default_factory=list)
    #: each distinct skip reason (``reason_template``) -> the layers it applies to
    reasons: dict[str, list[int]] = Field(default_factory=dict)
    #: layers whose routed (or shared) intermediate needs padding for this --tp
    padded_layers: list[int] = Field(default_factory=list)
    #: ``fused shared experts: enabled on MoE layer(s) [1, 2]; disabled on MoE layer(s) [3]``
    text: str = ""
    errors: int = 0
    warnings: int = 0


class PolicyReport(_Model):
    """The JSON of ``ckpt inspect --format json``; see ``docs/inspect.md``."""

    schema_version: int = SCHEMA_VERSION
    source: str = ""
    model: ModelSummary
    tp: int = 1
    ep: bool = False
    eplb: bool = False
    all2all: str | None = None
    fse_mode: FseMode = "auto"
    #: the engine target ``--fse auto`` decided for (``--target``), e.g. "vllm-0.33"
    target: str | None = None
    moe_layers: list[MoeLayerPolicy] = Field(default_factory=list)
    summary: PolicySummary
    issues: list[Issue] = Field(default_factory=list)
    #: what the target engine will do with the checkpoint (``--target``); see
    #: docs/engine-compat.md. None when no engine section was built.
    engine: EngineReport | None = None

    @property
    def has_errors(self) -> bool:
        """An error finding in the policy or in the engine section (exit code 1)."""
        if any(i.severity == "error" for i in self.issues):
            return True
        return bool(self.engine is not None and self.engine.has_errors)

    def layer(self, index: int) -> MoeLayerPolicy | None:
        for m in self.moe_layers:
            if m.layer == index:
                return m
        return None


def with_engine(policy: PolicyReport, engine: EngineReport | None) -> PolicyReport:
    """The policy report with its engine section (``ckpt inspect --target``) attached."""
    return policy.model_copy(update={"engine": engine})
