"""Engine compatibility: will the target engine load this checkpoint, and what
will it do with it? Rules are data (``rules.yaml``, the models here);
``policy.engine.build.build_engine_report`` runs them on a ``PolicyDecision``.

This is vLLM's view of a checkpoint's formats (which quantization method its loader picks,
what its backends round up, which TP splits it refuses), written from vLLM's source; it
switches on ``WeightFormat`` members itself on purpose and does not ask
``checkpoint_tool.formats`` (ckpt's view), so the two can disagree and the report shows it.

Importing this package loads the rule models only (``PolicyReport.engine`` holds an
``EngineReport``), not the checks.
"""

from checkpoint_tool.policy.engine.model import (
    EngineFinding,
    EngineReport,
    EngineSummary,
    RuleSpec,
    RuleTable,
    Target,
    load_rule_table,
    table_from_dict,
    version_in_range,
)

__all__ = [
    "EngineFinding",
    "EngineReport",
    "EngineSummary",
    "RuleSpec",
    "RuleTable",
    "Target",
    "load_rule_table",
    "table_from_dict",
    "version_in_range",
]
