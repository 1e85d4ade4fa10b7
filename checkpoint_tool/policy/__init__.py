"""Per-layer policy: FSE eligibility (vLLM's gates + ckpt's layout checks), TP alignment,
consistency findings; ``decide_policy(catalog, ...) -> PolicyDecision`` (the planner's input),
``build_policy(catalog, ...) -> PolicyReport`` (``ckpt inspect``)."""

from checkpoint_tool.policy.build import build_policy, decide_policy
from checkpoint_tool.policy.decision import (
    FseDecision,
    FseMode,
    LayerDecision,
    PolicyDecision,
    TpGeometry,
)
from checkpoint_tool.policy.report import (
    SCHEMA_VERSION,
    ExpertSchemes,
    ModelSummary,
    MoeLayerPolicy,
    PolicyReport,
    PolicySummary,
)

__all__ = [
    "SCHEMA_VERSION",
    "ExpertSchemes",
    "FseDecision",
    "FseMode",
    "LayerDecision",
    "ModelSummary",
    "MoeLayerPolicy",
    "PolicyDecision",
    "PolicyReport",
    "PolicySummary",
    "TpGeometry",
    "build_policy",
    "decide_policy",
]
