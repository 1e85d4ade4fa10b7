"""All-or-nothing FSE is decided per model: the main model and its MTP drafter separately.

vLLM 0.33 ``model_executor/layers/fused_moe/utils.py`` ``is_model_fused_shared_expert_compatible``
raises when one model's MoE layers disagree; it is called once per model on that model's own
layers: ``models/deepseek_v2.py`` ``DeepseekV2Model.__init__`` (``self.layers``, the main
decoder) and ``models/deepseek_mtp.py`` ``DeepSeekMTP.__init__`` (``self.model.layers``, the MTP
layers). amd/DeepSeek-R1-0528-MXFP4 leaves its MTP layer BF16 (excluded), which cannot fuse; the
main model still fuses every main MoE layer.
"""

from __future__ import annotations

import json

from catalog.producer_ckpt import write_checkpoint
from model.layouts import deepseek_mxfp4_bf16_mtp
from model.runs import ckpt, policy

from checkpoint_tool.policy.decision import FseDecision
from checkpoint_tool.policy.engine.model import load_rule_table
from checkpoint_tool.policy.fse import apply_model_rules

from .helpers import QUARK_MXFP4

AITER = "vllm-0.33-rocm-aiter-fse"


def _ok(slot: int) -> FseDecision:
    return FseDecision(enabled=True, code="ok", source="none", slots=[slot], chunk_size=8)


def _refused() -> FseDecision:
    return FseDecision(enabled=False, code="quark_excluded", reason="excluded", source="vllm")


def test_drafter_refusal_leaves_the_main_model_fused():
    decisions = {1: _ok(8), 2: _ok(8), 3: _refused()}
    target = load_rule_table().target(AITER)
    out, issues = apply_model_rules(
        decisions, mode="auto", ep=False, eplb=False, all2all=None, target=target,
        models={1: "main", 2: "main", 3: "mtp"},
    )  # fmt: skip
    assert [out[k].enabled for k in (1, 2, 3)] == [True, True, False]
    assert issues == []


def test_a_refusal_inside_one_model_turns_that_model_off():
    decisions = {1: _ok(8), 2: _refused(), 3: _ok(8)}
    target = load_rule_table().target(AITER)
    out, _ = apply_model_rules(
        decisions, mode="auto", ep=False, eplb=False, all2all=None, target=target,
        models={1: "main", 2: "main", 3: "mtp"},
    )  # fmt: skip
    assert [out[k].enabled for k in (1, 2, 3)] == [False, False, True]
    assert out[1].code == "target_all_or_nothing"


def test_mxfp4_r1_with_bf16_mtp_fuses_its_main_layers(tmp_path, capsys):
    config, tensors = deepseek_mxfp4_bf16_mtp(QUARK_MXFP4)
    root = write_checkpoint(tmp_path / "r1", tensors, config)
    report = policy(root, target=AITER)
    assert report.summary.fse_enabled_layers == [1, 2, 3]
    assert report.summary.fse_disabled_layers == [4]
    assert [m.layer for m in report.moe_layers if m.is_mtp] == [4]
    assert not [i for i in report.issues if i.severity == "error"]
    code, out, err = ckpt(capsys, "inspect", str(root), "--target", AITER, "--format", "json")
    engine = json.loads(out)["engine"]
    assert [f["rule"] for f in engine["findings"] if f["severity"] == "error"] == [], err
    assert code == 0


def test_one_model_mixed_is_still_refused(tmp_path, capsys):
    """A main layer that cannot fuse next to main layers that can: vLLM raises for the main
    model (the same function), so the engine verdict stays an error under ``--fse on``."""
    config, tensors = deepseek_mxfp4_bf16_mtp(QUARK_MXFP4)
    qc = config["quantization_config"]
    qc["exclude"] = [*qc["exclude"], "model.layers.2.mlp.shared_experts.gate_proj"]
    root = write_checkpoint(tmp_path / "r1", tensors, config)
    _, out, _ = ckpt(
        capsys, "inspect", str(root), "--target", AITER, "--fse", "on", "--format", "json"
    )
    rules = [f["rule"] for f in json.loads(out)["engine"]["findings"]]
    assert "fse_mixed_all_or_nothing" in rules
