"""Rule kinds and their fixed order, on hand-made recipes (each test states the expected name)."""

from __future__ import annotations

import pytest

from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.recipes import Recipe, RuleSet, scale_spelling
from checkpoint_tool.recipes.rules import when_matches


def make(rules: dict, **extra) -> Recipe:
    return Recipe.model_validate({"name": "t", "rules": rules, **extra})


def test_stages_run_regex_then_substring_then_prefix_then_suffix():
    # Each stage only matches what the previous stage produced, so any other order would stop
    # the chain early: a -> b (regex) -> c (substring) -> d (prefix) -> e (suffix).
    recipe = make(
        {
            # listed in reverse on purpose: the kinds run in the fixed order, not file order
            "suffix": [{"from": "d.x", "to": "e.x"}],
            "prefix": [{"from": "c.", "to": "d."}],
            "substring": [{"find": "b.", "replace": "c."}],
            "regex": [{"match": r"^a\.", "replace": "b."}],
        }
    )
    out = RuleSet(recipe).rename("a.x")
    assert out.name == "e.x"
    assert out.steps == ("regex[0]", "substring[0]", "prefix[0]", "suffix[0]")


def test_every_matching_rule_of_a_kind_applies_in_file_order():
    recipe = make(
        {
            "regex": [
                {"match": r"one", "replace": "two"},
                {"match": r"two", "replace": "three"},
                {"match": r"zzz", "replace": "never"},
            ]
        }
    )
    assert RuleSet(recipe).rename("x.one").name == "x.three"
    # reversed order: the second rule sees the first one's input only
    recipe2 = make(
        {"regex": [{"match": r"two", "replace": "three"}, {"match": r"one", "replace": "two"}]}
    )
    assert RuleSet(recipe2).rename("x.one").name == "x.two"


def test_regex_groups_and_first_occurrence_semantics():
    recipe = make(
        {
            "regex": [
                {"match": r"(\.experts\.\d+\.w[123])\.scale$", "replace": r"\1.weight_scale"}
            ],
            "substring": [{"find": ".w2", "replace": ".down"}],
        }
    )
    rules = RuleSet(recipe)
    assert rules.rename("l.experts.12.w3.scale").name == "l.experts.12.w3.weight_scale"
    # substring replaces the first occurrence only (vLLM's str.replace(..., 1))
    assert rules.rename("a.w2.w2.weight").name == "a.down.w2.weight"


def test_suffix_replaces_only_the_trailing_occurrence():
    recipe = make({"suffix": [{"from": "embed.weight", "to": "embed_tokens.weight"}]})
    assert (
        RuleSet(recipe).rename("embed.weight.embed.weight").name
        == "embed.weight.embed_tokens.weight"
    )


def test_drop_wins_over_every_other_rule_and_keeps_its_reason():
    recipe = make(
        {
            "drop": [{"match": r"inv_freq$", "reason": "recomputed"}],
            "keep": [{"match": r".*", "reason": "all"}],
        }
    )
    out = RuleSet(recipe).rename("model.layers.0.rotary_emb.inv_freq")
    assert out.dropped and out.name is None and out.reason == "recomputed"


def test_keep_stops_later_renames_but_not_the_fse_redirect():
    recipe = make(
        {
            "keep": [{"match": r"^mtp\.", "reason": "drafter"}],
            "regex": [{"match": r"\.scale$", "replace": ".weight_scale_inv"}],
        }
    )
    rules = RuleSet(recipe)
    assert rules.rename("mtp.0.attn.wq_a.scale").name == "mtp.0.attn.wq_a.scale"
    redirected = rules.rename(
        "mtp.0.ffn.shared_experts.w1.scale", redirect_to="mtp.0.ffn.experts.8.w1.scale"
    )
    assert redirected.name == "mtp.0.ffn.experts.8.w1.scale" and redirected.kept
    assert redirected.steps == ("fse", "keep[0]")


def test_fse_redirect_happens_before_the_rename_rules():
    # the substring rule must not see a redirected name: it has no shared_experts left
    recipe = make(
        {"substring": [{"find": ".shared_experts.w2", "replace": ".shared_experts.down"}]}
    )
    rules = RuleSet(recipe)
    assert rules.rename("l.3.shared_experts.w2.weight").name == "l.3.shared_experts.down.weight"
    out = rules.rename("l.3.shared_experts.w2.weight", redirect_to="l.3.experts.64.w2.weight")
    assert out.name == "l.3.experts.64.w2.weight" and out.redirected


def test_at_load_rules_change_the_engine_name_only():
    recipe = make(
        {
            "prefix": [{"from": "layers.", "to": "model.layers."}],
            "suffix": [{"from": "head.weight", "to": "lm_head.weight", "at_load": True}],
        }
    )
    rules = RuleSet(recipe)
    head = rules.rename("head.weight")
    assert (head.name, head.engine_name) == ("head.weight", "lm_head.weight")
    assert rules.loader_view(head.name) == head.engine_name
    layer = rules.rename("layers.0.attn.wq_a.weight")
    assert layer.name == layer.engine_name == "model.layers.0.attn.wq_a.weight"


def test_loader_view_exposes_a_rule_that_is_not_idempotent():
    # the reason `at_load` exists: applied twice, the head suffix rule breaks the name
    recipe = make({"suffix": [{"from": "head.weight", "to": "lm_head.weight"}]})
    rules = RuleSet(recipe)
    written = rules.rename("head.weight").name
    assert written == "lm_head.weight"
    assert rules.loader_view(written) == "lm_lm_head.weight"


@pytest.mark.parametrize(
    ("when", "config", "expected"),
    [
        ({"expert_dtype": "fp4"}, {"expert_dtype": "fp4"}, True),
        ({"expert_dtype": "fp4"}, {"expert_dtype": "fp8"}, False),
        (
            {"expert_dtype": "fp4"},
            {},
            True,
        ),  # vLLM's default: getattr(config, "expert_dtype", "fp4")
        ({"expert_dtype": ["fp4", "fp8"]}, {"expert_dtype": "fp8"}, True),
        (
            {"quantization_config.weight_block_size": [32, 32]},
            {"quantization_config": {"weight_block_size": [32, 32]}},
            True,
        ),
        (
            {"quantization_config.weight_block_size": [32, 32]},
            {"quantization_config": {"weight_block_size": [128, 128]}},
            False,
        ),
        (
            {"model_type": "qwen3_5_moe_text"},
            {"text_config": {"model_type": "qwen3_5_moe_text"}},
            True,
        ),
        ({"n_shared_experts": 2}, {"n_shared_experts": 1}, False),
    ],
)
def test_when_conditions(when, config, expected):
    assert when_matches(when, config) is expected


def test_rules_with_unmet_conditions_are_skipped():
    recipe = make(
        {
            "regex": [
                {"match": r"\.scale$", "replace": ".weight_scale", "when": {"expert_dtype": "fp4"}},
                {"match": r"\.scale$", "replace": ".weight_scale_inv"},
            ]
        }
    )
    assert RuleSet(recipe, {"expert_dtype": "fp4"}).rename("a.scale").name == "a.weight_scale"
    assert RuleSet(recipe, {"expert_dtype": "fp8"}).rename("a.scale").name == "a.weight_scale_inv"


FP8_BLOCK_DS = Scheme(format=WeightFormat.FP8_BLOCK, block=(128, 128), source="deepseek_fp8")
FP8_BLOCK_QUARK = Scheme(format=WeightFormat.FP8_BLOCK, block=(128, 128), source="quark")
MXFP4 = Scheme(format=WeightFormat.MXFP4, group_size=32, source="quark")
NVFP4 = Scheme(format=WeightFormat.NVFP4, group_size=16, source="modelopt")
FP8_TENSOR_DS = Scheme(format=WeightFormat.FP8_PER_TENSOR, source="deepseek_fp8")
MXFP8_V41 = Scheme(format=WeightFormat.FP8_BLOCK, block=(32, 32), source="deepseek_v4")
BF16 = Scheme(format=WeightFormat.UNQUANTIZED)


@pytest.mark.parametrize(
    ("scheme", "spelling"),
    [
        (FP8_BLOCK_DS, "weight_scale_inv"),
        (
            Scheme(format=WeightFormat.FP8_BLOCK, block=(128, 128), source="deepseek_v4"),
            "weight_scale_inv",
        ),
        (FP8_BLOCK_QUARK, "weight_scale"),
        (MXFP4, "weight_scale"),
        (NVFP4, "weight_scale"),
        (FP8_TENSOR_DS, "weight_scale"),
        (MXFP8_V41, "weight_scale"),
        (BF16, None),
        (None, None),
    ],
)
def test_scale_spelling_by_scheme(scheme, spelling):
    assert scale_spelling(scheme) == spelling


def test_alias_renames_scales_to_the_scheme_spelling_only():
    recipe = make(
        {"alias": [{"names": ["weight_scale", "weight_scale_inv"], "choose": "by_scheme"}]}
    )
    rules = RuleSet(recipe)
    quark = rules.rename("m.q_a_proj.weight_scale_inv", scheme=FP8_BLOCK_QUARK, is_scale=True)
    assert quark.name == "m.q_a_proj.weight_scale" and quark.steps == ("alias[0]",)
    native = rules.rename("m.q_a_proj.weight_scale", scheme=FP8_BLOCK_DS, is_scale=True)
    assert native.name == "m.q_a_proj.weight_scale_inv"
    # already right: untouched, and no rule matched
    same = rules.rename("m.e.0.gate_proj.weight_scale", scheme=MXFP4, is_scale=True)
    assert same.name == "m.e.0.gate_proj.weight_scale" and not same.matched
    # not a scale (NVFP4 global multiplier), or not flagged as one: untouched
    assert (
        rules.rename("m.x.weight_scale_2", scheme=NVFP4, is_scale=True).name == "m.x.weight_scale_2"
    )
    assert rules.rename("m.x.weight_scale", scheme=FP8_BLOCK_DS).name == "m.x.weight_scale"


def test_alias_fixed_choice_and_skip():
    recipe = make(
        {
            "alias": [
                {
                    "names": ["weight_scale", "weight_scale_inv"],
                    "choose": "weight_scale_inv",
                    "skip": r"keep\.me",
                }
            ]
        }
    )
    rules = RuleSet(recipe)
    assert rules.rename("a.weight_scale", scheme=MXFP4, is_scale=True).name == "a.weight_scale_inv"
    assert (
        rules.rename("keep.me.weight_scale", scheme=MXFP4, is_scale=True).name
        == "keep.me.weight_scale"
    )


def test_accept_marks_names_as_matched_without_renaming():
    recipe = make({"accept": [{"match": r"^model\.", "reason": "hf"}]})
    rules = RuleSet(recipe)
    ok = rules.rename("model.norm.weight")
    assert ok.matched and not ok.renamed and ok.steps == ("accept[0]",)
    assert not rules.rename("stray.tensor").matched


def test_recipe_validation_rejects_bad_regex_and_unknown_keys():
    with pytest.raises(ValueError, match="regular expression"):
        make({"regex": [{"match": "(", "replace": "x"}]})
    with pytest.raises(ValueError, match="Extra inputs"):
        make({"regex": [{"match": "a", "replace": "b", "bogus": 1}]})
    with pytest.raises(ValueError, match="reason"):
        make({"drop": [{"match": "a"}]})
