"""The documented JSON Schema is generated from the pydantic model and must be current."""

from __future__ import annotations

import json
from pathlib import Path

from checkpoint_tool.policy.schema import schema_text

DOC = Path(__file__).parents[2] / "docs" / "schemas" / "policy-report.schema.json"


def test_docs_schema_is_current():
    assert DOC.read_text(encoding="utf-8") == schema_text(), (
        "docs/schemas/policy-report.schema.json is stale: run "
        "`.venv/bin/python -m checkpoint_tool.policy.schema docs/schemas/policy-report.schema.json`"
    )


def test_schema_names_the_issue_4_fields():
    schema = json.loads(schema_text())
    props = schema["properties"]
    for key in ("model", "tp", "moe_layers", "summary", "issues"):
        assert key in props
    layer = schema["$defs"]["MoeLayerPolicy"]["properties"]
    for key in ("layer", "routed", "shared", "fse", "intermediate"):
        assert key in layer
    geo = schema["$defs"]["TpGeometry"]["properties"]
    assert {"size", "per_rank", "padded_per_rank", "pad_to"} <= set(geo)
    summary = schema["$defs"]["PolicySummary"]["properties"]
    assert {"fse_enabled_layers", "fse_disabled_layers", "reasons"} <= set(summary)
