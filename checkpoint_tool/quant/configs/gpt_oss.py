"""gpt-oss's native MXFP4 config: ``{"quant_method": "mxfp4", "modules_to_not_convert": [...]}``.

openai/gpt-oss-20b and -120b ship their routed experts in MXFP4 and everything else in BF16::

    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
        "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}

vLLM 0.33 picks ``GptOssMxfp4Config`` for it when ``model_type`` is ``gpt_oss``
(``model_executor/layers/quantization/mxfp4.py`` ``GptOssMxfp4Config.override_quantization_method``)
and never reads ``modules_to_not_convert`` (``Mxfp4Config.from_config`` returns ``cls()``):
``Mxfp4Config.get_quant_method`` gives every ``LinearBase`` ``UnquantizedLinearMethod`` and
every routed-experts layer the MXFP4 MoE method. The producer's own list is the
``modules_to_not_convert`` globs (transformers' ``Mxfp4HfQuantizer``).

The experts are stored as gpt-oss's 3-D parameters, one module per projection
(``model.layers.L.mlp.experts.gate_up_proj``): ``_blocks`` U8 ``[E, 2I, H/32, 16]`` (the
weight: E2M1 pairs, even element in the low nibble, 16 bytes per group of 32), ``_scales``
U8 ``[E, 2I, H/32]`` (E8M0) and ``_bias`` BF16 ``[E, 2I]``; gate and up rows interleaved.

Example::

    cfg = GptOssMxfp4Config.model_validate({"quant_method": "mxfp4"})
    cfg.scheme_for("model.layers.0.mlp.experts.gate_up_proj").short()   # 'mxfp4/32'
    cfg.scheme_for("model.layers.0.self_attn.q_proj").short()           # 'unquantized'
"""

from __future__ import annotations

import fnmatch
from typing import ClassVar, Literal

from pydantic import Field

from checkpoint_tool.quant.configs.base import QuantConfigBase, mxfp4_scheme, unquantized
from checkpoint_tool.quant.configs.names import GPT_OSS_PARAMS, expert_parts
from checkpoint_tool.quant.scheme import Scheme


def gpt_oss_expert_param(module: str) -> bool:
    """Whether ``module`` is a gpt-oss 3-D expert parameter (``X.experts.gate_up_proj``)."""
    head, _, leaf = module.rpartition(".")
    return leaf in GPT_OSS_PARAMS and head.endswith(".experts")


def gpt_oss_scheme(rule: str) -> Scheme:
    """gpt-oss's expert storage: MXFP4/32, U8 blocks and U8 E8M0 ``_scales``, weight-only."""
    return mxfp4_scheme(
        source="gpt_oss", rule=rule, scale_suffix="scales", activation=None, spec="gpt_oss"
    )


class GptOssMxfp4Config(QuantConfigBase):
    """gpt-oss's ``quantization_config`` (``quant_method: mxfp4``)."""

    source: ClassVar[str] = "gpt_oss"

    quant_method: Literal["mxfp4", "gpt_oss_mxfp4"]
    modules_to_not_convert: list[str] = Field(default_factory=list)

    def scheme_for(self, module: str) -> Scheme:
        if gpt_oss_expert_param(module) or expert_parts(module) is not None:
            return gpt_oss_scheme(
                "vllm: Mxfp4Config.get_quant_method: routed experts are MXFP4 (GptOssMxfp4MoEMethod)"
            )
        return unquantized(
            self.source, "vllm: Mxfp4Config.get_quant_method: linear layers stay unquantized"
        )

    def producer_scheme_for(self, module: str) -> Scheme:
        for entry in self.modules_to_not_convert:
            if fnmatch.fnmatch(module, entry) or fnmatch.fnmatch(module, f"{entry}.*"):
                return unquantized(self.source, f"gpt_oss: modules_to_not_convert {entry!r}")
        return self.scheme_for(module)

    def summary(self) -> str:
        n = len(self.modules_to_not_convert)
        return f"gpt-oss mxfp4/32 experts, {n} modules_to_not_convert"
