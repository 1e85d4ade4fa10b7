"""The model-structure rules read the router biases per name pattern: the same layers and
tensors as a regex over each name, in catalog order (the last of a layer wins)."""

from __future__ import annotations

import re
from pathlib import Path

from checkpoint_tool.catalog.catalog import Catalog, TensorEntry
from checkpoint_tool.policy.engine.checks_model import _bias_layers
from checkpoint_tool.policy.engine.context import EngineContext, ServeOptions
from checkpoint_tool.policy.engine.model import load_rule_table

_BIAS = re.compile(r"^(?:model\.)?layers\.(\d+)\.mlp\.gate\.e_score_correction_bias$")


def _context(names: list[str]) -> EngineContext:
    tensors = {n: TensorEntry(n, "s.safetensors", "F32", (8,), 0, 32) for n in names}
    cat = Catalog(root=Path("/nonexistent"), tensors=tensors, files=["s.safetensors"])
    return EngineContext.build(cat, None, load_rule_table().target(None), ServeOptions())


def _by_name(names: list[str]) -> dict[int, str]:
    out = {}
    for name in names:
        if m := _BIAS.match(name):
            out[int(m.group(1))] = name
    return out


def test_bias_layers_per_pattern_equal_the_regex_per_name():
    names = [
        "model.layers.12.mlp.gate.e_score_correction_bias",
        "model.layers.3.mlp.gate.e_score_correction_bias",
        "layers.3.mlp.gate.e_score_correction_bias",  # the same layer again: it wins
        "model.layers.3.mlp.gate.weight",
        "model.layers.007.mlp.gate.e_score_correction_bias",
        "model.layers.x.mlp.gate.e_score_correction_bias",
    ]
    for order in (names, list(reversed(names))):
        assert _bias_layers(_context(order)) == _by_name(order)


def test_bias_layers_of_a_synthetic_deepseek(synth_ckpt):
    from checkpoint_tool.catalog import open_catalog

    cat = open_catalog(synth_ckpt("deepseek-v3-fp8"))
    ctx = EngineContext.build(cat, None, load_rule_table().target(None), ServeOptions())
    found = _bias_layers(ctx)
    assert found and found == _by_name(list(cat.tensors))
