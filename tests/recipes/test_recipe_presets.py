"""Rules in order on the real names of every synth preset (the recipe auto_recipe picks)."""

from __future__ import annotations

import pytest

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.recipes import RuleSet, auto_recipe
from checkpoint_tool.synth import PRESETS

EXPECTED = {
    "deepseek_v3": "deepseek-v3",
    "deepseek_v4": "deepseek-v4-amd",
    "qwen3_5_moe": "qwen3.5-moe",
    "qwen3_moe": "qwen3.5-moe",
}
#: presets of a model family several recipes cover (Qwen3-MoE, compressed-tensors' Qwen3-MoE
#: exports included, matches qwen3.5-moe: its model_type and architecture are listed there);
#: Qwen2-MoE the generic pass-through (HF names
#: are what vLLM's qwen2_moe.py loads; gpt-oss's names are what gpt_oss.py loads)
EXPECTED_BY_PRESET = {"qwen2-moe": "generic", "gpt-oss": "generic"}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_auto_recipe_matches_every_name_of_the_preset(synth_ckpt, preset):
    cat = open_catalog(synth_ckpt(preset))
    recipe = auto_recipe(cat)
    assert recipe.name == EXPECTED_BY_PRESET.get(preset, EXPECTED.get(PRESETS[preset].family))
    rules = RuleSet(recipe, cat.config)
    results = [rules.rename(name) for name in sorted(cat.tensors)]
    unmatched = [r.source for r in results if not r.matched]
    assert not unmatched, unmatched[:5]
    written = [r.name for r in results if not r.dropped]
    assert len(written) == len(set(written))
    if recipe.name == "deepseek-v4-amd":
        for r in results:
            if not r.dropped and not r.kept:
                assert rules.loader_view(r.name) == r.engine_name, r.source
        assert sum(r.renamed for r in results) > len(results) // 2
    else:
        assert all(r.name == r.source for r in results)
