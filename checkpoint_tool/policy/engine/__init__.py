"""Engine compatibility (issue 10): will the target engine load this checkpoint, and what
will it do with it? Rules are data (``rules.yaml``); ``build_engine_report`` runs them.

Importing this package does not import ``checkpoint_tool.policy.report`` (which holds
``EngineReport`` in ``PolicyReport.engine``), so there is no import cycle.
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


def build_engine_report(*args, **kwargs):
    """See ``checkpoint_tool.policy.engine.build.build_engine_report``."""
    from checkpoint_tool.policy.engine.build import build_engine_report as _build

    return _build(*args, **kwargs)


__all__ = [
    "EngineFinding",
    "EngineReport",
    "EngineSummary",
    "RuleSpec",
    "RuleTable",
    "Target",
    "build_engine_report",
    "load_rule_table",
    "table_from_dict",
    "version_in_range",
]
