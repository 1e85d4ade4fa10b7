"""A converted DeepSeek-V4 checkpoint holds the names vLLM's loader maps DeepSeek's to, and
ckpt reads it under those names (vLLM 0.33 ``models/deepseek_v4/amd/model.py``
``_make_deepseek_v4_weights_mapper``: ``layers.`` -> ``model.layers.``; fp4 expert
``.scale`` -> ``.weight_scale``, every other ``.scale`` -> ``.weight_scale_inv``; unfused
``.shared_experts.w2`` -> ``.shared_experts.down_proj``; ``mtp.`` left to the drafter)."""

from __future__ import annotations

import json

import pytest

from checkpoint_tool.model import model_facts
from checkpoint_tool.quant.configs.load import load_quant_config

from .runs import ckpt, errors, validate


def test_synth_convert_validate(tmp_path, capsys):
    src, dst = tmp_path / "A", tmp_path / "B"
    code, _, err = ckpt(capsys, "synth", "deepseek-v4", str(src))
    assert code == 0, err
    code, _, err = ckpt(capsys, "convert", str(src), str(dst), "--tp", "2")
    assert code == 0, err
    assert errors(validate(dst)) == []
    index = json.loads((dst / "model.safetensors.index.json").read_text())["weight_map"]
    # the loader's names, as the mapper writes them
    assert "model.layers.0.ffn.experts.0.w1.weight_scale" in index
    assert "model.layers.0.ffn.shared_experts.down_proj.weight_scale_inv" in index
    config = json.loads((dst / "config.json").read_text())
    facts = model_facts(config, set(index))
    layer = facts.layer(0)
    assert layer.shared_module("down") == "model.layers.0.ffn.shared_experts.down_proj"
    assert layer.shared_module("gate") == "model.layers.0.ffn.shared_experts.w1"
    code, _, err = ckpt(capsys, "verify", "--source", str(src), str(dst))
    assert code == 0, err


@pytest.mark.parametrize(
    ("module", "suffix"),
    [
        ("layers.0.ffn.experts.3.w1", "scale"),
        ("model.layers.0.ffn.experts.3.w1", "weight_scale"),
        ("model.layers.0.attn.wq_a", "weight_scale_inv"),
        ("model.layers.0.ffn.shared_experts.down_proj", "weight_scale_inv"),
        ("mtp.0.ffn.experts.1.w2", "scale"),
    ],
)
def test_scale_spelling_follows_the_names(module, suffix):
    qc = load_quant_config(
        {
            "model_type": "deepseek_v4",
            "expert_dtype": "fp4",
            "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
        }
    )
    assert qc.scheme_for(module).scale_suffix == suffix
