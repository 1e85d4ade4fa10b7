"""Keys of an FP8 ``quantization_config`` that vLLM never reads are not errors.

vLLM 0.33 ``model_executor/layers/quantization/fp8.py`` ``Fp8Config.from_config`` reads only
``quant_method``, ``activation_scheme``, ``ignored_layers`` / ``modules_to_not_convert``,
``weight_block_size`` and ``store_dtype``; MiniMax-M2.5 / M2.7 write ``"fmt":
"float8_e4m3fn"`` and load.
"""

from __future__ import annotations

import pytest

from checkpoint_tool.quant.configs import DeepSeekFp8Config
from checkpoint_tool.quant.configs.load import load_quant_config
from checkpoint_tool.quant.scheme import WeightFormat

MINIMAX_M25_QC = {
    "activation_scheme": "dynamic",
    "fmt": "float8_e4m3fn",
    "quant_method": "fp8",
    "weight_block_size": [128, 128],
    "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"],
}


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "e4m3", "e5m2", None])
def test_fmt_is_not_read(fmt):
    qc = dict(MINIMAX_M25_QC, fmt=fmt)
    cfg = load_quant_config({"model_type": "minimax_m2", "quantization_config": qc})
    assert isinstance(cfg, DeepSeekFp8Config)
    scheme = cfg.scheme_for("model.layers.0.block_sparse_moe.experts.0.w1")
    # the scheme is the weights' (F8_E4M3 block 128), whatever fmt says
    assert scheme.format is WeightFormat.FP8_BLOCK
    assert scheme.weight_dtypes == ("F8_E4M3",)


def test_unknown_keys_are_ignored():
    qc = dict(MINIMAX_M25_QC, producer_note="anything", store_dtype="bf16")
    cfg = load_quant_config({"quantization_config": qc})
    assert isinstance(cfg, DeepSeekFp8Config)
    assert cfg.ignored == ["gate", "e_score_correction_bias", "lm_head"]
