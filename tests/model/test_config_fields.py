"""One rule for where a config.json field lives: a multimodal wrapper's ``text_config`` wins.

The modules that used to look fields up on their own (model facts, recipe ``when``, target
spec names, config edits) must read the same value from a wrapper whose top level disagrees
with its ``text_config`` (the recipe rules, the target specs and the config edit once read
the top level first while the model facts read ``text_config``).
"""

from __future__ import annotations

import copy

from checkpoint_tool.model import model_facts
from checkpoint_tool.model.config_fields import (
    ConfigView,
    config_field,
    config_parts,
    merged_config,
    text_config,
)

TEXT = {
    "model_type": "qwen3_5_moe_text",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "expert_dtype": None,
}
#: a Qwen3.5-style wrapper whose top level also states (different) sizes
WRAPPER = {
    "model_type": "qwen3_5_moe",
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "moe_intermediate_size": 999,
    "num_experts": 64,
    "expert_dtype": "fp8",
    "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "quark", "exclude": []},
    "text_config": TEXT,
}


def test_text_config_wins_for_a_wrapper():
    assert config_parts(WRAPPER) == [TEXT, WRAPPER]
    assert text_config(WRAPPER) is TEXT
    assert config_field(WRAPPER, "moe_intermediate_size") == 128
    assert config_field(WRAPPER, "model_type") == "qwen3_5_moe_text"
    # the language-model config's alias beats the top level's own spelling
    assert config_field(WRAPPER, "num_experts") == 8


def test_top_level_fills_what_the_text_config_lacks():
    assert config_field(WRAPPER, "tie_word_embeddings") is False
    assert config_field(WRAPPER, "quantization_config.quant_method") == "quark"
    # None counts as absent: the top level's value is read
    assert config_field(WRAPPER, "expert_dtype") == "fp8"
    assert config_field(WRAPPER, "missing", 7) == 7


def test_plain_config_is_read_as_it_is():
    plain = {"num_hidden_layers": 4, "num_experts": 16, "moe_intermediate_size": 64}
    assert config_parts(plain) == [plain] and text_config(plain) is plain
    assert config_field(plain, "moe_intermediate_size") == 64
    assert config_field({"num_local_experts": 128}, "num_experts") == 128
    # the own name wins over its alias within one part
    assert config_field({"num_experts": 64, "num_local_experts": 128}, "num_experts") == 64
    assert config_field(None, "num_experts") is None and config_parts(None) == []


def test_a_text_config_without_layers_is_no_language_model_config():
    cfg = {"hidden_size": 64, "text_config": {"hidden_size": 32, "vocab_size": 10}}
    assert config_parts(cfg) == [cfg, cfg["text_config"]]
    assert text_config(cfg) is cfg
    assert config_field(cfg, "hidden_size") == 64
    assert config_field(cfg, "vocab_size") == 10


def test_merged_config_holds_what_config_field_reads():
    merged = merged_config(WRAPPER)
    assert "text_config" not in merged
    for key in {*WRAPPER, *TEXT} - {"text_config"}:
        value = config_field(WRAPPER, key)
        assert merged[key] == value, key
    assert merged_config({"q_lora_rank": None}) == {"q_lora_rank": None}
    assert merged_config({"num_local_experts": 8}) == {"num_local_experts": 8, "num_experts": 8}
    assert merged_config({"num_experts": 4, "num_local_experts": 8})["num_experts"] == 4


def test_config_view_reads_a_whole_wrapper_by_the_rule():
    view = ConfigView(WRAPPER, family="qwen3_moe")
    assert view.req_int("moe_intermediate_size") == 128
    assert view.req_int("num_experts") == 8
    assert view.opt_int("decoder_sparse_step", 1) == 1


def test_every_reader_agrees_on_a_disagreeing_wrapper():
    """Model facts, recipe ``when``, target spec names and the config edit all see
    ``text_config``'s 128, not the top level's 999 (the old top-first readers saw 999)."""
    from checkpoint_tool.plan.config_edit import edit_config
    from checkpoint_tool.plan.geometry import Geometry
    from checkpoint_tool.recipes.rules import when_matches
    from checkpoint_tool.targets import load_spec
    from checkpoint_tool.targets.instance import config_names

    facts = model_facts(WRAPPER)
    assert facts.layer(0).moe_intermediate_size == 128 and facts.layer(0).n_routed == 8
    assert when_matches({"moe_intermediate_size": 128}, WRAPPER)
    assert not when_matches({"moe_intermediate_size": 999}, WRAPPER)
    assert when_matches({"num_experts": 8}, WRAPPER)
    names = config_names(load_spec("qwen3_moe"), WRAPPER)
    assert (names["moe_intermediate_size"], names["num_experts"]) == (128, 8)

    geo = Geometry(tp=1, moe_tp=1, size=128, padded=192)
    out, notes = edit_config(copy.deepcopy(WRAPPER), geometry=geo, module_renames={}, metadata={})
    assert out is not None and notes
    # every part that states the size gets the padded one: no reader finds a stale size
    assert out["text_config"]["moe_intermediate_size"] == 192
    assert out["moe_intermediate_size"] == 192
    assert config_field(out, "moe_intermediate_size") == 192


def test_geometry_reads_the_shared_width_where_the_model_facts_do():
    """A wrapper whose top level says 999 and whose text_config says 256: the padded shared
    width comes from 256 (plan.geometry reads through config_field)."""
    from checkpoint_tool.model.facts import MoeLayerFacts
    from checkpoint_tool.plan.geometry import plan_geometry
    from checkpoint_tool.policy.decision import FseDecision, LayerDecision, PolicyDecision

    wrapper = {
        "shared_expert_intermediate_size": 999,
        "text_config": {"num_hidden_layers": 2, "shared_expert_intermediate_size": 256},
    }
    layer = MoeLayerFacts(
        layer=1,
        prefix="model.layers.1.mlp",
        n_routed=4,
        n_shared=1,
        moe_intermediate_size=128,
        shared_intermediate_size=256,
    )
    off = FseDecision(enabled=False, code="fse_off")
    facts = type(
        "Facts",
        (),
        {
            "moe_layers": [layer],
            "width_key": "moe_intermediate_size",
            "shared_width_key": "shared_expert_intermediate_size",
        },
    )()
    decision = PolicyDecision(
        target=None,
        tp=2,
        ep=False,
        fse_mode="off",
        facts=facts,
        resolved=None,
        layers={1: LayerDecision(layer, off, 32, "", 96, "")},
    )
    geo = plan_geometry(decision, {1: False}, pad_to=None, config=wrapper)
    assert (geo.shared_size, geo.shared_padded) == (256, 384)  # 2 ranks x 96-aligned shares
