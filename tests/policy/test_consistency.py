"""Structural MoE findings and config patterns that match nothing."""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint_tool.catalog.patterns import NamePatterns
from checkpoint_tool.model import model_facts
from checkpoint_tool.policy.consistency import (
    moe_structure_issues,
    scan_expert_tensors,
    unmatched_pattern_issues,
)
from checkpoint_tool.quant.resolve import load_quant_config

from .helpers import dsv3, quark


@dataclass
class Entry:
    shape: tuple[int, ...] = (4, 4)
    file: str = "model-00001.safetensors"


def _names(layers=(1, 2, 3), experts=8, shared=True) -> dict[str, Entry]:
    out = {"model.embed_tokens.weight": Entry(), "model.layers.0.mlp.gate_proj.weight": Entry()}
    for layer in layers:
        p = f"model.layers.{layer}.mlp"
        out[f"{p}.gate.weight"] = Entry()
        for e in range(experts):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                out[f"{p}.experts.{e}.{proj}.weight"] = Entry()
                out[f"{p}.experts.{e}.{proj}.weight_scale"] = Entry()
        if shared:
            for proj in ("gate_proj", "up_proj", "down_proj"):
                out[f"{p}.shared_experts.{proj}.weight"] = Entry()
    return out


def test_scan_groups_by_moe_prefix():
    scan = scan_expert_tensors(NamePatterns.of_names(_names(layers=(1,), experts=3)))
    g = scan["model.layers.1.mlp"]
    assert g["experts"] == {0, 1, 2} and not g["fused"] and len(g["shared"]) == 3
    assert "model.layers.0.mlp" not in scan


def test_complete_checkpoint_has_no_structural_issue():
    assert moe_structure_issues(model_facts(dsv3()), _names()) == []


def test_missing_expert_extra_expert_and_experts_on_a_dense_layer():
    names = _names()
    del names["model.layers.2.mlp.experts.5.down_proj.weight"]
    names["model.layers.3.mlp.experts.8.gate_proj.weight"] = Entry()
    names["model.layers.0.mlp.experts.0.gate_proj.weight"] = Entry()
    issues = moe_structure_issues(model_facts(dsv3()), names)
    by_rule = {i.rule: i for i in issues}
    assert set(by_rule) == {"moe_expert_missing", "moe_expert_unexplained", "moe_layer_unexplained"}
    assert "model.layers.2.mlp.experts.5.down_proj.weight" in by_rule["moe_expert_missing"].message
    assert (
        by_rule["moe_expert_unexplained"].tensor == "model.layers.3.mlp.experts.8.gate_proj.weight"
    )
    assert "index(es) 8 beyond n_routed = 8" in by_rule["moe_expert_unexplained"].message
    assert (
        by_rule["moe_layer_unexplained"].tensor == "model.layers.0.mlp.experts.0.gate_proj.weight"
    )
    assert all(i.severity == "error" for i in issues)


def test_shared_expert_undeclared_or_missing():
    issues = moe_structure_issues(model_facts(dsv3(n_shared_experts=0)), _names())
    assert {i.rule for i in issues} == {"shared_expert_unexplained"}
    issues = moe_structure_issues(model_facts(dsv3()), _names(shared=False))
    assert [i.rule for i in issues] == ["shared_expert_missing"] * 3


def test_fused_3d_expert_count_checked_against_config():
    names = {
        "model.layers.1.mlp.experts.gate_up_proj": Entry((4, 256, 256)),
        "model.layers.1.mlp.experts.down_proj": Entry((4, 256, 128)),
        "model.layers.1.mlp.shared_experts.gate_proj.weight": Entry(),
        "model.layers.1.mlp.shared_experts.up_proj.weight": Entry(),
        "model.layers.1.mlp.shared_experts.down_proj.weight": Entry(),
    }
    facts = model_facts(dsv3(num_hidden_layers=2), names)
    issues = moe_structure_issues(facts, names)
    assert [i.rule for i in issues] == ["moe_expert_count", "moe_expert_count"]
    assert "holds 4 experts, config.json says n_routed = 8" in issues[0].message


def test_config_patterns_matching_nothing_are_reported():
    names = _names()
    lqc = {
        "model.layers.1.self_attn.q_a_proj": {},  # no attention tensors at all
        "model.layers.2.mlp.experts.0.down_proj": {},  # exact, matches
        "*shared_experts*": {},  # glob, matches
        "model.layers.9.*": {},  # glob, nothing
    }
    exclude = ["lm_head", r"re:model\.layers\.\d+\.mlp\.gate$", "model.layers.1.mlp.experts"]
    cfg = quark(
        exclude=exclude, layer_quant_config={k: quark()["global_quant_config"] for k in lqc}
    )
    qconfig = load_quant_config({"quantization_config": cfg})
    issues = unmatched_pattern_issues(qconfig, names, "config.json")
    unmatched = sorted(i.message.split("'")[1] for i in issues)
    assert unmatched == ["lm_head", "model.layers.1.self_attn.q_a_proj", "model.layers.9.*"]
    assert all(i.rule == "pattern_unmatched" and i.severity == "warning" for i in issues)


def test_many_stale_entries_are_one_warning_with_their_pattern_and_count():
    names = _names()
    stale = [f"model.layers.{i}.mlp.experts.{e}.up_proj" for i in (90, 91) for e in range(50)]
    qconfig = load_quant_config({"quantization_config": quark(exclude=["lm_head", *stale])})
    issues = unmatched_pattern_issues(qconfig, names, "config.json")
    # lm_head is stale too (no lm_head in these names): one field, one folded warning
    [issue] = [i for i in issues if i.message.startswith("exclude")]
    assert "(101 entries, first 'lm_head')" in issue.message
    assert "model.layers.{90..91}.mlp.experts.{0..49}.up_proj" in issue.message
