"""Pick and validate the config model of a checkpoint from config.json (and hf_quant_config.json).

Example::

    load_quant_config({"quantization_config": {"quant_method": "fp8",
                                               "weight_block_size": [128, 128]}})
    # DeepSeekFp8Config(quant_method='fp8', weight_block_size=(128, 128), ...)
    load_quant_config({})            # NoQuantConfig()
    load_quant_config({"quantization_config": {"quant_method": "gptq"}})
    # InputError: config.json: quantization_config.quant_method 'gptq' is not supported; ...
"""

from __future__ import annotations

from pydantic import ValidationError

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.configs import (
    CompressedTensorsConfig,
    DeepSeekFp8Config,
    DeepSeekV4Config,
    GptOssMxfp4Config,
    ModelOptConfig,
    NoQuantConfig,
    QuantConfig,
    QuarkConfig,
)

SUPPORTED_METHODS = (
    "fp8",
    "quark",
    "modelopt",
    "deepseek_v4_fp8",
    "compressed-tensors",
    "mxfp4 (gpt-oss)",
)


def load_quant_config(
    config: dict | None, hf_quant_config: dict | None = None, *, where: str = "config.json"
) -> QuantConfig:
    """The config model for a checkpoint: ``config`` is config.json (or a bare quant config).

    Raises ``InputError`` for an unsupported ``quant_method`` or a malformed config.
    """
    try:
        return _load(config or {}, hf_quant_config, where)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InputError(
            f"{where}: quantization config is malformed at {loc or 'top level'}: {err['msg']}; "
            "fix the config or regenerate the checkpoint"
        ) from None


def _load(config: dict, hf_quant: dict | None, where: str) -> QuantConfig:
    if hf_quant and isinstance(hf_quant.get("quantization"), dict):
        return ModelOptConfig.from_hf_quant_config(hf_quant)
    qc = config.get("quantization_config") if "quant_method" not in config else config
    if qc is None:
        return NoQuantConfig()
    if not isinstance(qc, dict):
        raise InputError(f"{where}: quantization_config is not an object")
    method = str(qc.get("quant_method", "")).lower()
    if method in ("fp8", "deepseek_v4_fp8"):
        model_type = str(config.get("model_type", ""))
        if model_type.startswith("deepseek_v4") or "expert_dtype" in config:
            return DeepSeekV4Config.model_validate(
                {**qc, "expert_dtype": config.get("expert_dtype", "fp4")}
            )
        return DeepSeekFp8Config.model_validate(qc)
    if method == "quark":
        return QuarkConfig.model_validate(qc)
    if method == "modelopt":
        return ModelOptConfig.from_inline(qc)
    # vLLM takes mxfp4 as gpt-oss's only for model_type gpt_oss (quantization/mxfp4.py
    # GptOssMxfp4Config.override_quantization_method)
    if method in ("mxfp4", "gpt_oss_mxfp4") and config.get("model_type") == "gpt_oss":
        return GptOssMxfp4Config.model_validate(qc)
    if method == "compressed-tensors":
        return CompressedTensorsConfig.from_config(qc, config)
    raise InputError(
        f"{where}: quantization_config.quant_method {qc.get('quant_method')!r} is not supported; "
        f"ckpt reads {', '.join(SUPPORTED_METHODS)}"
    )
