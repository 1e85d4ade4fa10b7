"""The preset contract: a name, a one-line summary, dims, and a function that builds a layout.

Example::

    spec = PRESETS["quark-mxfp4"]
    layout = spec.build(spec.tiny, PresetOptions())
    layout.config["quantization_config"]["quant_method"]   # "quark"
    len(layout.tensors)                                     # 213
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from checkpoint_tool.synth.dims import Dims
from checkpoint_tool.synth.layout import SynthLayout


@dataclass(frozen=True)
class PresetOptions:
    """Layout switches beyond sizes.

    ``fused_experts``: write routed experts as Quark does for models whose experts are fused
    3-D parameters: BF16 ``mlp.experts.gate_up_proj`` [E, 2I, H] / ``down_proj`` [E, H, I]
    (Quark presets with the DeepSeek-V3 architecture only).
    """

    fused_experts: bool = False


@dataclass(frozen=True)
class PresetSpec:
    """One named synthetic checkpoint kind."""

    name: str
    summary: str
    family: str  # "deepseek_v3" | "deepseek_v4" | "qwen3_5_moe" | "qwen3_moe"
    producer: str  # "deepseek" | "quark" | "modelopt" | "qwen" | "compressed-tensors"
    tiny: Dims
    full: Dims
    build: Callable[[Dims, PresetOptions], SynthLayout]
    supports_fused_experts: bool = False
    #: False for the BF16 presets (no quantized tensor at all)
    quantized: bool = True
