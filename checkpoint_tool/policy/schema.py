"""The JSON Schema of ``PolicyReport`` (``ckpt inspect --format json``), kept in ``docs/``.

Regenerate after changing ``policy/report.py``::

    .venv/bin/python -m checkpoint_tool.policy.schema docs/schemas/policy-report.schema.json

``tests/policy/test_schema.py`` fails while the file in docs/ is stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from checkpoint_tool.policy.report import SCHEMA_VERSION, PolicyReport

SCHEMA_PATH = Path("docs/schemas/policy-report.schema.json")


def policy_report_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the report, from the pydantic model."""
    schema = PolicyReport.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://ckpt.dev/schemas/policy-report-v{SCHEMA_VERSION}.schema.json",
        **schema,
    }


def schema_text() -> str:
    """The schema as written to docs/ (sorted keys, two-space indent, final newline)."""
    return json.dumps(policy_report_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else SCHEMA_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(schema_text(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
