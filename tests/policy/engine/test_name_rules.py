"""Name-matching rules: patterns whose meaning differs between Quark and vLLM, and patterns
that match nothing. Each test adds one pattern to a preset's config and states, by hand,
which modules Quark meant and which vLLM decides."""

from __future__ import annotations

import copy

from .helpers import by_rule, engine

FP8_T = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False, "symmetric": True}
FP8_SPEC = {"weight": FP8_T, "input_tensors": FP8_T, "output_tensors": None, "bias": None}

SHARED = [
    f"model.layers.{i}.mlp.shared_experts.{p}"
    for i in (1, 2, 3)
    for p in ("down_proj", "gate_proj", "up_proj")
]


def names(report, rule):
    return by_rule(report).get(rule, [])


def test_preset_patterns_mean_the_same(variant):
    for preset in ("quark-mxfp4", "quark-hybrid", "quark-mxfp4-ptpc-attn"):
        report = engine(variant(preset))
        assert not [f for f in report.findings if f.rule.startswith("name_")], preset


def test_re_key_in_layer_quant_config_is_read_literally(variant):
    def edit(qc):
        qc["layer_quant_config"]["re:.*shared_experts\\..*"] = FP8_SPEC

    [f] = names(engine(variant("quark-mxfp4", edit)), "name_pattern_changes_storage")
    assert f.details["pattern"] == "re:.*shared_experts\\..*"
    assert "`re:` keys literally" in f.message
    assert f.modules == SHARED  # meant fp8, vLLM builds them as the global mxfp4


def test_exclude_glob_is_not_understood(variant):
    def edit(qc):
        qc["exclude"].append("*shared_experts*")

    [f] = names(engine(variant("quark-mxfp4", edit)), "name_pattern_changes_storage")
    assert "not globs" in f.message and f.modules == SHARED
    assert f.details["vllm_modules"] == 0 and f.details["quark_modules"] == len(SHARED)


def test_key_without_star_matches_as_substring(variant):
    key = "model.layers.2.mlp.experts.5.down_proj"

    def edit(qc):
        qc["layer_quant_config"][key] = FP8_SPEC

    [f] = names(engine(variant("quark-mxfp4", edit)), "name_pattern_changes_storage")
    assert "substring of the key" in f.message
    assert f.layers == [2]
    # Quark applied it to that one module; vLLM to the whole FusedMoE layer of layer 2
    assert key not in f.modules
    assert all(m.startswith("model.layers.2.mlp.experts.") for m in f.modules)


def test_layer_type_quant_config_is_ignored(variant):
    def edit(qc):
        qc["layer_type_quant_config"] = {"Linear": FP8_SPEC}

    [f] = names(engine(variant("quark-mxfp4", edit)), "name_pattern_changes_storage")
    assert "never applies layer_type_quant_config" in f.message


def test_same_storage_difference_is_a_warning(variant):
    def edit(qc):
        qc["layer_type_quant_config"] = {"Linear": copy.deepcopy(qc["global_quant_config"])}

    report = engine(variant("quark-mxfp4", edit))
    [f] = names(report, "name_pattern_differs")
    assert f.severity == "warning"
    assert not names(report, "name_pattern_changes_storage")


def test_pattern_that_matches_nothing(variant):
    def edit(qc):
        qc["exclude"].append("model.layers.99.mlp.gate")
        qc["layer_quant_config"]["*nonexistent_proj"] = FP8_SPEC

    found = names(engine(variant("quark-mxfp4", edit)), "name_pattern_unmatched")
    assert {f.message.split("'")[1] for f in found} == {
        "model.layers.99.mlp.gate",
        "*nonexistent_proj",
    }


def test_router_exclusions_are_not_unmatched(variant):
    # the hybrid export excludes routers and MTP heads by name: real modules, not stale
    assert not names(engine(variant("quark-hybrid")), "name_pattern_unmatched")


def test_exact_name_excludes_of_one_layers_experts_are_one_finding(variant):
    # Quark writes an excluded MoE layer as one exclude entry per expert projection; vLLM
    # matches exclude against the FusedMoE layer name: one finding, the pattern and a count
    mods = [
        f"model.layers.2.mlp.experts.{e}.{p}" for e in range(4) for p in ("up_proj", "down_proj")
    ]

    def edit(qc):
        qc["exclude"].extend(mods)

    report = engine(variant("quark-mxfp4", edit))
    found = [f for f in report.findings if f.rule.startswith("name_pattern")]
    [f] = found
    assert "'model.layers.2.mlp.experts.{0..3}.{down_proj,up_proj}' (8 entries)" in f.message
    assert sorted(f.details["patterns"]) == sorted(mods)
    assert f.layers == [2]
