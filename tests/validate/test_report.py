"""Report model, exit-code policy and renderers (JSON schema, JUnit XML, Markdown)."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from checkpoint_tool.report import Issue
from checkpoint_tool.validate import ValidateOptions, ValidateReport, validate_checkpoint
from checkpoint_tool.validate.checks import CHECK_IDS, CHECKS
from checkpoint_tool.validate.render import render_junit, render_markdown
from checkpoint_tool.validate.report import (
    CheckResult,
    CheckStatus,
    build_report,
    check_status,
    report_json_schema,
)

from .factory import build_checkpoint, poke_tensor

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "validate-report.schema.json"
SCALE = "model.layers.1.mlp.experts.3.down_proj.weight_scale"


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One error (E8M0 NaN) and one warning (total_size = file sizes)."""
    dst = build_checkpoint(tmp_path_factory.mktemp("broken") / "ckpt", total_size="files")
    poke_tensor(dst, SCALE, 0, b"\xff")
    return dst


def err(rule: str) -> Issue:
    return Issue(severity="error", rule=rule, message="x")


def warn(rule: str) -> Issue:
    return Issue(severity="warning", rule=rule, message="x")


def test_report_schema_is_current() -> None:
    assert SCHEMA.read_text() == report_json_schema(), (
        "docs/schemas/validate-report.schema.json is stale; regenerate it (see "
        "checkpoint_tool.validate.report.report_json_schema)"
    )


def test_check_ids_are_unique_and_documented() -> None:
    assert len(CHECK_IDS) == len(set(CHECK_IDS))
    doc = (Path(__file__).resolve().parents[2] / "docs" / "validate.md").read_text()
    missing = [c for c in CHECK_IDS if f"`{c}`" not in doc]
    assert missing == [], f"rules not documented in docs/validate.md: {missing}"
    assert all(c.title and c.fn.__doc__ for c in CHECKS)


@pytest.mark.parametrize(
    ("findings", "strict", "status", "exit_code"),
    [
        ([], False, CheckStatus.passed, 0),
        ([warn("a")], False, CheckStatus.warned, 0),
        ([warn("a")], True, CheckStatus.failed, 1),
        ([err("a"), warn("a")], False, CheckStatus.failed, 1),
    ],
)
def test_exit_code_policy(findings, strict, status, exit_code) -> None:
    assert check_status(findings, strict=strict) is status
    result = CheckResult(id="a", category="structure", title="t", status=status, findings=findings)
    report = build_report("p", [result], files=1, tensors=1, strict=strict)
    assert report.exit_code == exit_code
    assert report.summary.errors == sum(f.severity == "error" for f in findings)


def test_json_round_trips(broken: Path) -> None:
    report = validate_checkpoint(broken)
    doc = json.loads(report.model_dump_json())
    again = ValidateReport.model_validate(doc)
    assert again == report
    assert doc["exit_code"] == 1 and doc["summary"]["errors"] == 1
    assert doc["summary"]["warnings"] == 1


def test_junit_one_testcase_per_rule(broken: Path) -> None:
    report = validate_checkpoint(broken)
    root = ET.fromstring(render_junit(report))
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == CHECK_IDS
    by_name = {c.get("name"): c for c in cases}
    failure = by_name["scale_values"].find("failure")
    assert failure is not None
    assert "error [scale_values]" in failure.text and SCALE in failure.text
    assert "model-00002-of-00002.safetensors" in failure.text
    # the warning does not fail its case unless strict
    ts = by_name["total_size"]
    assert ts.find("failure") is None and "warning [total_size]" in ts.find("system-out").text
    assert by_name["policy_drift"].find("skipped") is not None
    suite = root.find("testsuite")
    assert suite.get("failures") == "1" and suite.get("tests") == str(len(CHECK_IDS))


def test_junit_strict_fails_on_warnings(broken: Path) -> None:
    report = validate_checkpoint(broken, ValidateOptions(strict=True))
    root = ET.fromstring(render_junit(report))
    ts = next(c for c in root.iter("testcase") if c.get("name") == "total_size")
    assert ts.find("failure") is not None


def test_output_is_deterministic(broken: Path, tmp_path: Path) -> None:
    """Same checkpoint (even copied elsewhere) -> same JUnit and JSON apart from the path."""
    copy = tmp_path / "ckpt"
    shutil.copytree(broken, copy)
    a = validate_checkpoint(broken)
    b = validate_checkpoint(copy)
    assert render_junit(a).replace(str(broken), "P") == render_junit(b).replace(str(copy), "P")
    assert a.model_copy(update={"path": "P"}) == b.model_copy(update={"path": "P"})


def test_markdown_lists_checks_and_findings(broken: Path) -> None:
    md = render_markdown(validate_checkpoint(broken))
    assert "| scales | `scale_values` | failed | 1 |" in md
    assert f"error [scale_values] model-00002-of-00002.safetensors: {SCALE}:" in md


def test_only_restricts_the_run(broken: Path) -> None:
    report = validate_checkpoint(broken, only=["total_size"])
    ran = [c.id for c in report.checks if c.status is not CheckStatus.skipped]
    assert ran == ["total_size"] and report.exit_code == 0
