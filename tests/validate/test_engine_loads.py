"""``engine_loads``: validate fails what the target engine refuses (the inspect --target
verdict), for ckpt's own outputs and for planted failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint_tool.validate import ValidateOptions, validate_checkpoint

from .test_converted import convert


def _engine(path: Path, target: str | None = None):
    report = validate_checkpoint(str(path), ValidateOptions(target=target), only=["engine_loads"])
    [result] = [c for c in report.checks if c.id == "engine_loads"]
    return result, list(result.findings)


@pytest.fixture(scope="module")
def outputs(synth_ckpt, tmp_path_factory):
    src = synth_ckpt("deepseek-v3-fp8")
    root = tmp_path_factory.mktemp("engine")
    out = {"default": root / "default", "fse_on": root / "fse_on", "aiter": root / "aiter"}
    convert(src, out["default"], "--tp", "2")
    convert(src, out["fse_on"], "--tp", "2", "--fse", "on")
    convert(src, out["aiter"], "--tp", "2", "--target", "vllm-0.33-rocm-aiter-fse")
    return out


def test_default_output_loads_on_the_default_target(outputs):
    result, issues = _engine(outputs["default"])
    assert result.status == "passed" and issues == []


def test_forced_slots_fail_on_a_stock_engine_and_pass_where_fse_is_on(outputs):
    result, issues = _engine(outputs["fse_on"])  # recorded target: the default, stock vLLM
    assert result.status == "failed"
    assert any("[fse_slots_unfused]" in i.message and "KeyError" in i.message for i in issues)
    result, _ = _engine(outputs["fse_on"], target="vllm-0.33-rocm-aiter-fse")
    assert result.status == "passed"
    # converted for the AITER target: it records the target, so plain validate passes ...
    config = json.loads((outputs["aiter"] / "config.json").read_text())
    assert config["ckpt"]["target"] == "vllm-0.33-rocm-aiter-fse" and config["ckpt"]["fse_layers"]
    assert _engine(outputs["aiter"])[0].status == "passed"
    # ... and --target asks about another engine
    assert _engine(outputs["aiter"], target="vllm-0.32")[0].status == "failed"


def test_router_bias_without_noaux_tc_fails(outputs, tmp_path):
    import shutil

    bad = tmp_path / "bias"
    shutil.copytree(outputs["default"], bad)
    config = json.loads((bad / "config.json").read_text())
    assert config.get("topk_method") == "noaux_tc"  # the preset writes it as DeepSeek does
    config.pop("topk_method")
    (bad / "config.json").write_text(json.dumps(config))
    result, issues = _engine(bad)
    assert result.status == "failed"
    assert any("router_bias_without_noaux_tc" in i.message for i in issues)
