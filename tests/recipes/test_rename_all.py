"""``RuleSet.rename_all`` (a column of names, stage by stage) gives, name for name, what
``RuleSet.rename`` gives: on every bundled recipe over real synth names, and on hand-made
recipes that exercise keep, at_load rules diverging the engine name, aliases and accept."""

from __future__ import annotations

import random

import pytest

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.quant.resolve import resolve_catalog
from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.recipes import Recipe, RuleSet, load_recipe
from checkpoint_tool.recipes.loader import bundled_names


def one_by_one(rules: RuleSet, names, schemes, is_scale):
    out = [
        rules.rename(n, scheme=s, is_scale=bool(k), drop_checked=True)
        for n, s, k in zip(names, schemes, is_scale, strict=True)
    ]
    return (
        [r.name for r in out],
        [r.engine_name for r in out],
        [r.steps for r in out],
        [r.kept for r in out],
    )


def column(rules: RuleSet, names, schemes, is_scale):
    got = rules.rename_all(list(names), list(schemes), bytes(is_scale))
    assert len(got.written) == len(got.engine) == len(got.steps) == len(got.kept) == len(names)
    return got.written, got.engine, got.steps, [bool(k) for k in got.kept]


PRESETS = ["deepseek-v3-fp8", "quark-hybrid", "deepseek-v4", "qwen3.5-moe-mxfp4", "modelopt-nvfp4"]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("recipe", bundled_names())
def test_bundled_recipes_rename_a_column_as_one_by_one(synth_ckpt, preset, recipe):
    cat = open_catalog(synth_ckpt(preset))
    rc = resolve_catalog(cat)
    names = list(cat.tensors)
    random.Random(7).shuffle(names)  # no reliance on name order
    schemes = [rc.tensors[n].scheme for n in names]
    is_scale = [rc.tensors[n].role == "scale" for n in names]
    rules = RuleSet(load_recipe(recipe), cat.config or {})
    assert column(rules, names, schemes, is_scale) == one_by_one(rules, names, schemes, is_scale)


@pytest.mark.parametrize("at_load", [True, False])
def test_keep_at_load_alias_and_accept_stages_as_one_by_one(at_load):
    recipe = Recipe.model_validate(
        {
            "name": "t",
            "rules": {
                "keep": [{"match": r"\.keep_me$", "reason": "k"}],
                "regex": [{"match": r"^layers\.", "replace": "model.layers."}],
                "substring": [{"find": ".w2.", "replace": ".down."}],
                "prefix": [{"name": "head", "from": "head.", "to": "lm_head.", "at_load": at_load}],
                "suffix": [{"from": ".scale", "to": ".weight_scale"}],
                "alias": [{"names": ["weight_scale", "weight_scale_inv"], "choose": "by_scheme"}],
                "accept": [
                    {"match": r"^other\.", "reason": "a"},
                    {"match": r"^(also|other)\.", "reason": "b"},
                ],
            },
        }
    )
    rules = RuleSet(recipe)
    fp8 = Scheme(format=WeightFormat.FP8_BLOCK, block=(128, 128), source="deepseek_fp8")
    mx = Scheme(format=WeightFormat.MXFP4, group_size=32, source="quark")
    names = [
        "layers.1.ffn.w2.weight",
        "layers.1.ffn.w2.scale",
        "head.weight",
        "head.weight_scale_inv",
        "head.x.keep_me",
        "layers.2.keep_me",
        "other.thing",
        "also.thing",
        "nothing.at.all",
        "model.layers.3.mlp.weight_scale_inv",
        "model.layers.3.mlp.weight_scale",
    ]
    schemes = [fp8, fp8, None, mx, None, None, None, None, None, mx, fp8]
    is_scale = [0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1]
    expected = one_by_one(rules, names, schemes, is_scale)
    assert column(rules, names, schemes, is_scale) == expected
    # the cases the test is for actually occur
    written, engine, steps, kept = expected
    diverged = any(w != e for w, e in zip(written, engine, strict=True))
    assert diverged == at_load
    assert sum(kept) == 2 and any(s == () for s in steps)
    assert written[9].endswith(".weight_scale") and written[10].endswith(".weight_scale_inv")
