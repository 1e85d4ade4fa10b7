"""``ckpt plan`` and ``ckpt recipes`` through the real entry point."""

from __future__ import annotations

import json

import pytest
from main_run import run_main as _run

from checkpoint_tool.cli.options import parse_layers
from checkpoint_tool.errors import UsageError
from checkpoint_tool.plan.serialize import plan_load


def test_plan_json_is_the_whole_plan(monkeypatch, capsys, synth_ckpt):
    src = synth_ckpt("quark-hybrid", moe_intermediate=160)
    code, out, _ = _run(monkeypatch, capsys, "plan", str(src), "--tp", "2", "--format", "json")
    assert code == 0
    plan = plan_load(json.loads(out))
    assert plan.options.tp == 2 and plan.summary.padded_intermediate_size == 256
    assert plan.tensor_count() == plan.summary.output_tensors


def test_plan_human_summary(monkeypatch, capsys, synth_ckpt):
    src = synth_ckpt("quark-hybrid", moe_intermediate=160)
    code, out, _ = _run(
        monkeypatch,
        capsys,
        "plan",
        str(src),
        "--tp",
        "2",
        "--max-shard-size",
        "2MB",
        "--target",
        "vllm-per-layer-fse",
    )
    assert code == 0
    assert "written as routed slots on MoE layer(s) [3, 4]" in out
    assert (
        "target vllm-per-layer-fse" in out and "VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS=1" in out
    )
    # the default target, a stock vLLM, fuses none: nothing is redirected, nothing to set
    code, out, _ = _run(monkeypatch, capsys, "plan", str(src), "--tp", "2")
    assert code == 0 and "kept shared on [1, 2, 3, 4]" in out
    assert "target vllm-0.33" in out and "no engine settings needed" in out
    assert "160 -> 256" in out
    assert "model-00001-of-" in out
    assert "peak memory" in out and "nothing was written" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "x"], "--layers"),
        (["--max-shard-size", "lots"], "cannot read size"),
        (["--recipe", "nope"], "unknown recipe"),
    ],
)
def test_plan_usage_errors_are_one_line_exit_2(monkeypatch, capsys, synth_ckpt, args, message):
    src = synth_ckpt("quark-mxfp4")
    code, _, err = _run(monkeypatch, capsys, "plan", str(src), *args)
    assert code == 2
    assert message in err and err.count("\n") == 1


def test_parse_layers():
    assert parse_layers("3,4") == [3, 4]
    assert parse_layers("3-5,7") == [3, 4, 5, 7]
    assert parse_layers(None) is None
    with pytest.raises(UsageError):
        parse_layers("5-3")


def test_recipes_commands(monkeypatch, capsys):
    code, out, _ = _run(monkeypatch, capsys, "recipes", "list", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["rule_order"][:3] == ["drop", "fse", "keep"]
    assert {r["name"] for r in doc["recipes"]} >= {"deepseek-v3", "deepseek-v4-amd", "generic"}
    code, out, _ = _run(monkeypatch, capsys, "recipes", "show", "deepseek-v4-amd")
    assert code == 0 and "vllm/models/deepseek_v4/amd/model.py" in out
    code, out, _ = _run(monkeypatch, capsys, "recipes", "schema")
    assert code == 0 and json.loads(out)["title"] == "ckpt recipe"
