"""Per-layer policy: FSE eligibility (vLLM's gates + ckpt's layout checks), TP alignment,
consistency findings; ``build_policy(catalog, ...) -> PolicyReport`` (``ckpt inspect``)."""

from checkpoint_tool.policy.build import build_policy
from checkpoint_tool.policy.report import (
    SCHEMA_VERSION,
    ExpertSchemes,
    FseDecision,
    FseMode,
    ModelSummary,
    MoeLayerPolicy,
    PolicyReport,
    PolicySummary,
    TpGeometry,
)

__all__ = [
    "SCHEMA_VERSION",
    "ExpertSchemes",
    "FseDecision",
    "FseMode",
    "ModelSummary",
    "MoeLayerPolicy",
    "PolicyReport",
    "PolicySummary",
    "TpGeometry",
    "build_policy",
]
