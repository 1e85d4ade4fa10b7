"""Quantization config models (DeepSeek FP8, Quark, ModelOpt, DeepSeek-V4, compressed-tensors)
-> ``Scheme``."""

from checkpoint_tool.quant.configs.base import NoQuantConfig, QuantConfigBase
from checkpoint_tool.quant.configs.compressed_tensors import CompressedTensorsConfig
from checkpoint_tool.quant.configs.deepseek_fp8 import DeepSeekFp8Config
from checkpoint_tool.quant.configs.deepseek_v4 import DeepSeekV4Config
from checkpoint_tool.quant.configs.gpt_oss import GptOssMxfp4Config
from checkpoint_tool.quant.configs.modelopt import ModelOptConfig
from checkpoint_tool.quant.configs.quark import QuarkConfig
from checkpoint_tool.quant.configs.quark_spec import QuarkLayerSpec, QuarkTensorSpec

QuantConfig = (
    NoQuantConfig
    | DeepSeekFp8Config
    | QuarkConfig
    | ModelOptConfig
    | DeepSeekV4Config
    | GptOssMxfp4Config
    | CompressedTensorsConfig
)

__all__ = [
    "CompressedTensorsConfig",
    "DeepSeekFp8Config",
    "DeepSeekV4Config",
    "GptOssMxfp4Config",
    "ModelOptConfig",
    "NoQuantConfig",
    "QuantConfig",
    "QuantConfigBase",
    "QuarkConfig",
    "QuarkLayerSpec",
    "QuarkTensorSpec",
]
