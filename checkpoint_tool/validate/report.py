"""The typed report of ``ckpt validate``: one result per check, each with its findings.

A *check* is one rule (one function in ``validate/checks.py``); it passes, fails (an error
finding), warns (warnings only) or is skipped (with the reason). Findings are the shared
``checkpoint_tool.report.Issue``; their ``rule`` is usually the check id, except for findings a
check relays from another layer (e.g. quant-config resolution issues).

Example (``ckpt validate out/ --format json``, abridged)::

    {"path": "out", "strict": false, "exit_code": 1,
     "summary": {"files": 2, "tensors": 57, "checks": 21, "passed": 18, "failed": 1,
                 "warned": 0, "skipped": 2, "errors": 1, "warnings": 0},
     "checks": [{"id": "scale_values", "category": "scales",
                 "title": "scales are finite and positive; no E8M0 255 (NaN)",
                 "status": "failed", "skipped_reason": null,
                 "findings": [{"severity": "error", "rule": "scale_values",
                               "file": "model-00001-of-00002.safetensors",
                               "tensor": "model.layers.1.mlp.experts.0.up_proj.weight_scale",
                               "message": "3 E8M0 scale bytes are 255 (NaN), first at [5, 2]"}]}]}
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field

from checkpoint_tool.errors import EXIT_FINDINGS, EXIT_OK
from checkpoint_tool.report import Issue

CATEGORIES = ("structure", "completeness", "schemes", "scales", "checksums", "drift", "deep")


class CheckStatus(str, Enum):
    passed = "passed"
    failed = "failed"  # at least one error finding (or a warning under --strict)
    warned = "warned"  # warnings only
    skipped = "skipped"  # not applicable or not requested; ``skipped_reason`` says why


class CheckResult(BaseModel):
    """The outcome of one rule."""

    id: str
    category: str
    title: str
    status: CheckStatus
    skipped_reason: str | None = None
    findings: list[Issue] = Field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == "warning")


class ValidateSummary(BaseModel):
    """Counts for the summary line and for CI dashboards."""

    files: int = 0
    tensors: int = 0
    checks: int = 0
    passed: int = 0
    failed: int = 0
    warned: int = 0
    skipped: int = 0
    errors: int = 0
    warnings: int = 0


class ValidateReport(BaseModel):
    """Everything ``ckpt validate`` found. ``exit_code``: 0 clean, 1 findings."""

    path: str
    strict: bool = False
    #: manifest written by ``--write-manifest`` (path), if any
    manifest_written: str | None = None
    summary: ValidateSummary
    checks: list[CheckResult]
    exit_code: int

    def findings(self) -> list[Issue]:
        """Every finding, in check order."""
        return [f for c in self.checks for f in c.findings]


def check_status(findings: list[Issue], *, strict: bool) -> CheckStatus:
    """``failed`` on any error (or any warning when strict), ``warned`` on warnings only."""
    if any(f.severity == "error" for f in findings):
        return CheckStatus.failed
    if findings:
        return CheckStatus.failed if strict else CheckStatus.warned
    return CheckStatus.passed


def build_report(
    path: str,
    checks: list[CheckResult],
    *,
    files: int,
    tensors: int,
    strict: bool,
    manifest_written: str | None = None,
) -> ValidateReport:
    """Summarize check results and decide the exit code (1 on errors, or warnings if strict)."""
    summary = ValidateSummary(files=files, tensors=tensors, checks=len(checks))
    for c in checks:
        setattr(summary, c.status.value, getattr(summary, c.status.value) + 1)
        summary.errors += c.errors
        summary.warnings += c.warnings
    failing = summary.errors > 0 or (strict and summary.warnings > 0)
    return ValidateReport(
        path=path,
        strict=strict,
        manifest_written=manifest_written,
        summary=summary,
        checks=checks,
        exit_code=EXIT_FINDINGS if failing else EXIT_OK,
    )


def report_json_schema() -> str:
    """The JSON Schema of ``ValidateReport`` as committed in docs/schemas/ (stable text).

    Regenerate (the test ``test_report_schema_is_current`` fails until you do)::

        python -c "from checkpoint_tool.validate.report import report_json_schema as s; \
print(s(), end='')" > docs/schemas/validate-report.schema.json
    """
    import json

    schema = ValidateReport.model_json_schema(mode="serialization")
    schema["title"] = "ckpt validate report"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
