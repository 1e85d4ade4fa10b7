"""Hand-written configs and layer facts for policy unit tests (no checkpoint needed)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from checkpoint_tool.model import model_facts

FIXTURES = Path(__file__).parents[1] / "fixtures" / "producer-headers"

#: the real Quark 0.13 MXFP4 export config (global MXFP4, '*self_attn*' FP8 per-channel)
QUARK_MXFP4 = json.loads(
    (
        FIXTURES / "quark-0.13_tiny-deepseek_v3_mxfp4-global_ptpc-fp8-attn.quantization_config.json"
    ).read_text()
)
MXFP4_SPEC = QUARK_MXFP4["global_quant_config"]
FP8_CHANNEL_SPEC = QUARK_MXFP4["layer_quant_config"]["*self_attn*"]


def fp8_block_spec() -> dict:
    """Quark per_block [128, 128] FP8 spec (kept FP8 of a DeepSeek source)."""
    spec = copy.deepcopy(MXFP4_SPEC)
    spec["weight"].update(
        dtype="fp8_e4m3", qscheme="per_block", block_size=[128, 128], group_size=None,
        ch_axis=None, scale_format=None, symmetric=True,
    )  # fmt: skip
    spec["input_tensors"].update(
        dtype="fp8_e4m3", qscheme="per_group", group_size=128, scale_format=None, symmetric=True
    )
    return spec


def quark(**overrides: object) -> dict:
    cfg = copy.deepcopy(QUARK_MXFP4)
    cfg.update(overrides)
    return cfg


def dsv3(**overrides: object) -> dict:
    cfg = {
        "model_type": "deepseek_v3",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "first_k_dense_replace": 1,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "moe_intermediate_size": 128,
        "num_experts_per_tok": 2,
        "num_nextn_predict_layers": 0,
    }
    cfg.update(overrides)
    return cfg


def dsv3_layer(layer: int = 1, **overrides: object):
    return model_facts(dsv3(**overrides)).layer(layer)
