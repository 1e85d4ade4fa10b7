"""The rule table as data: every rule has a check, version ranges filter rules, the docs page
is generated from the table, and ckpt inspect carries the engine section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from checkpoint_tool.cli.app import app
from checkpoint_tool.errors import UsageError
from checkpoint_tool.policy.engine.build import implemented_rule_ids
from checkpoint_tool.policy.engine.docs import render
from checkpoint_tool.policy.engine.model import load_rule_table, version_in_range

DOC = Path(__file__).parents[3] / "docs" / "engine-compat.md"


def test_every_rule_has_exactly_one_check():
    table = load_rule_table()
    assert {r.id for r in table.rules} == implemented_rule_ids()


def test_rules_cite_upstream_files():
    for r in load_rule_table().rules:
        assert r.source.startswith("vllm/") and r.source.endswith(".py"), r.id
        assert r.severity in ("error", "warning", "info")


@pytest.mark.parametrize(
    ("version", "spec", "inside"),
    [
        ("0.33.0", ">=0.33", True),
        ("0.33.0", ">=0.33,<0.34", True),
        ("0.34.0", ">=0.33,<0.34", False),
        ("0.32.9", ">=0.33", False),
        ("0.33", "==0.33.0", True),
        ("1.0.0", ">0.33", True),
    ],
)
def test_version_ranges(version, spec, inside):
    assert version_in_range(version, spec) is inside


def test_unknown_target_is_a_usage_error():
    with pytest.raises(UsageError, match=r"vllm-0\.33"):
        load_rule_table().target("vllm-9.99")


def test_docs_page_is_current():
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/engine-compat.md is stale: run "
        "`.venv/bin/python -m checkpoint_tool.policy.engine.docs docs/engine-compat.md`"
    )


def test_inspect_json_has_engine_section_and_exit_code(variant):
    runner = CliRunner()
    ok = runner.invoke(app, ["inspect", str(variant("quark-mxfp4")), "--format", "json"])
    assert ok.exit_code == 0, ok.output
    engine = json.loads(ok.output)["engine"]
    assert engine["target"] == "vllm-0.33" and engine["summary"]["will_load"] is True
    bad = runner.invoke(
        app,
        ["inspect", str(variant("quark-hybrid")), "--target", "vllm-0.33-rocm-aiter-fse", "--format", "json"],
    )
    assert bad.exit_code == 1
    rules = {f["rule"] for f in json.loads(bad.output)["engine"]["findings"]}
    assert "fse_mixed_all_or_nothing" in rules
