"""``resolve_catalog`` resolves each FusedMoE (layer, projection) once under vLLM semantics:
the result must equal resolving every tensor on its own, also when config rules name single
experts (vLLM resolves the layer; the producer resolved each expert)."""

from __future__ import annotations

import random

import pytest

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.quant.configs import (
    DeepSeekFp8Config,
    DeepSeekV4Config,
    ModelOptConfig,
    QuarkConfig,
)
from checkpoint_tool.quant.resolve import resolve_catalog, resolve_tensor
from checkpoint_tool.synth import PRESETS

MX = {"weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}}
FP8_BLOCK = {
    "weight": {
        "dtype": "fp8_e4m3",
        "qscheme": "per_block",
        "block_size": [128, 128],
        "scale_type": "float32",
    }
}
E3 = "model.layers.1.mlp.experts.3"
#: configs whose rules single out experts (exact names, globs, regexes, substrings)
CONFIGS = {
    "quark": QuarkConfig.model_validate(
        {
            "quant_method": "quark",
            "export": {},
            "global_quant_config": MX,
            "exclude": [f"{E3}.down_proj", r"re:.*experts\.1[0-9]\.up_proj", "*.experts.7.*"],
            "layer_quant_config": {"*.experts.5.*": FP8_BLOCK, f"{E3}.gate_proj": FP8_BLOCK},
        }
    ),
    "quark-probe": QuarkConfig.model_validate(
        {
            "quant_method": "quark",
            "export": {},
            "global_quant_config": MX,
            "layer_quant_config": {"*.experts.0.down_proj": FP8_BLOCK},
        }
    ),
    "deepseek-fp8": DeepSeekFp8Config.model_validate(
        {
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "ignored_layers": [f"{E3}.up_proj", "model.layers.2.mlp.experts"],
        }
    ),
    "deepseek-v4": DeepSeekV4Config.model_validate(
        {"quant_method": "fp8", "ignored_layers": ["layers.1.ffn.experts.3.w2"]}
    ),
    "modelopt": ModelOptConfig.model_validate(
        {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["*.experts.4.*", E3]}
    ),
}
SUFFIXES = ("weight", "weight_scale", "weight_scale_inv", "scale", "input_scale", "bias")


def _names(layers=("model.layers.1.mlp", "model.layers.2.mlp", "layers.1.ffn")) -> list[str]:
    names = []
    for layer in layers:
        for e in (*range(21), 100, 255):
            for proj in ("gate_proj", "up_proj", "down_proj", "w1", "w2", "w3"):
                names += [f"{layer}.experts.{e}.{proj}.{s}" for s in SUFFIXES]
        names += [f"{layer}.shared_experts.down_proj.weight", f"{layer}.gate.weight"]
    names += ["model.layers.1.mlp.experts.gate_up_proj", "lm_head.weight", "model.norm.weight"]
    random.Random(0).shuffle(names)  # the first expert seen of a layer is not always expert 0
    return names


@pytest.mark.parametrize("semantics", ["vllm", "producer"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_shared_cache_gives_each_tensor_its_own_resolution(config, semantics):
    qconfig, cache = CONFIGS[config], {}
    for name in _names():
        shared = resolve_tensor(qconfig, name, semantics=semantics, cache=cache)
        alone = resolve_tensor(qconfig, name, semantics=semantics)
        assert shared == alone, name


def test_rules_that_name_one_expert_still_differ_under_producer_semantics():
    cache: dict = {}
    by_expert = {
        e: resolve_tensor(
            CONFIGS["quark"],
            f"model.layers.1.mlp.experts.{e}.down_proj.weight",
            cache=cache,
            semantics="producer",
        ).scheme.rule
        for e in (2, 3, 5, 7)
    }
    assert len(set(by_expert.values())) == 4, by_expert  # global, exclude, layer key, glob


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_catalog_resolution_equals_per_tensor_resolution(synth_ckpt, preset):
    cat = open_catalog(synth_ckpt(preset))
    for semantics in ("vllm", "producer"):
        rc = resolve_catalog(cat, semantics=semantics)
        assert list(rc.tensors) == list(cat.tensors)
        for name, e in cat.tensors.items():
            alone = resolve_tensor(
                rc.qconfig, name, dtype=e.dtype, shape=e.shape, semantics=semantics
            )
            got = rc.tensors[name]
            if got.scheme.rule.startswith("deepseek_v4: float weight"):
                # resolve_catalog's own pass: a float linear stored without .scale
                assert alone.scheme.quantized and e.dtype in ("BF16", "F16", "F32")
                assert got._replace(scheme=alone.scheme) == alone
            else:
                assert got == alone, name
