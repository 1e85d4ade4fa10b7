"""DeepSeek native block FP8 (``quant_method: fp8``), read the way vLLM's ``Fp8Config`` reads it.

Weights are F8_E4M3 with one F32 ``weight_scale_inv`` per 128x128 block (a multiplier despite
the name). ``scale_fmt: ue8m0`` means the block scales are powers of two (DeepSeek-V3.1+ still
stores them as F32). ``ignored_layers`` / ``modules_to_not_convert`` list unquantized modules by
exact name; vLLM checks a FusedMoE layer by substring against entries that contain "experts".

Example config::

    {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
     "weight_block_size": [128, 128]}
"""

from __future__ import annotations

from functools import lru_cache
from typing import ClassVar, Literal

from checkpoint_tool.quant.configs.base import (
    QuantConfigBase,
    fp8_block_scheme,
    unquantized,
    with_rule,
)
from checkpoint_tool.quant.configs.names import expert_parts, packed_siblings
from checkpoint_tool.quant.scheme import Scheme, WeightFormat


class Fp8LayerSkips(QuantConfigBase):
    """vLLM ``Fp8Config``'s list of modules left unquantized (DeepSeek FP8 and DeepSeek-V4).

    vLLM checks a linear by exact name and a FusedMoE layer by substring, against entries
    that contain "experts"; the producer skipped exactly the modules named. Subclasses give
    the schemes of what is not skipped (``moe_scheme``, ``linear_scheme_for``).
    """

    ignored_layers: list[str] | None = None
    modules_to_not_convert: list[str] | None = None
    #: the rule of a skipped FusedMoE layer (``{entry}``, ``{layer}``)
    moe_skip_rule: ClassVar[str] = "ignored_layers: {entry!r} (FusedMoE)"

    @property
    def ignored(self) -> list[str]:
        """vLLM reads ``ignored_layers`` first, then ``modules_to_not_convert``."""
        return list(self.ignored_layers or self.modules_to_not_convert or [])

    def skipped(self, module: str) -> Scheme | None:
        """Unquantized if ``module`` is named exactly (vLLM and the producer agree), else None."""
        if module in self.ignored:
            return unquantized(self.source, f"ignored_layers: exact {module!r}")
        return None

    def moe_scheme(self, layer: str) -> Scheme:
        """Scheme of the routed experts of FusedMoE ``layer`` (not skipped)."""
        raise NotImplementedError

    def linear_scheme_for(self, module: str) -> Scheme:
        """Scheme of a linear that is not skipped, as vLLM resolves it."""
        raise NotImplementedError

    def scheme_for(self, module: str) -> Scheme:
        moe = expert_parts(module)
        if moe is not None:
            layer = moe[0]
            for entry in self.ignored:
                if "experts" in entry and layer in entry:
                    rule = self.moe_skip_rule.format(entry=entry, layer=layer)
                    return unquantized(self.source, rule)
            return self.moe_scheme(layer)
        skipped = self.skipped(module)
        return skipped if skipped is not None else self.linear_scheme_for(module)


class DeepSeekFp8Config(Fp8LayerSkips):
    """``quantization_config`` of DeepSeek-V3/R1 style block-FP8 checkpoints."""

    source: ClassVar[str] = "deepseek_fp8"
    moe_skip_rule: ClassVar[str] = (
        "ignored_layers: {entry!r} contains FusedMoE layer {layer!r} (vLLM)"
    )

    quant_method: Literal["fp8"] = "fp8"
    activation_scheme: Literal["dynamic", "static"] = "dynamic"
    #: the producer's note of the FP8 format ("e4m3", MiniMax-M2.5's "float8_e4m3fn"): vLLM's
    #: ``Fp8Config.from_config`` (``model_executor/layers/quantization/fp8.py``) never reads it,
    #: so neither does ckpt; the weights' dtype (F8_E4M3, checked per tensor) is what counts
    fmt: str | None = None
    weight_block_size: tuple[int, int] | None = None
    scale_fmt: str | None = None

    def quantized_scheme(self, rule: str) -> Scheme:
        """The one FP8 scheme this config gives every quantized linear."""
        return _fp8_scheme_with_rule(
            self.weight_block_size, self.scale_fmt, self.activation_scheme, rule
        )

    def moe_scheme(self, layer: str) -> Scheme:
        return self.quantized_scheme(f"quant_method fp8 (FusedMoE layer {layer!r})")

    def linear_scheme_for(self, module: str) -> Scheme:
        packed = packed_siblings(module)
        where = f" (shard of {packed[0]})" if packed else ""
        return self.quantized_scheme(f"quant_method fp8{where}")

    def producer_scheme_for(self, module: str) -> Scheme:
        skipped = self.skipped(module)
        return skipped if skipped is not None else self.quantized_scheme("quant_method fp8")

    def summary(self) -> str:
        blk = self.weight_block_size
        kind = f"block {blk[0]}x{blk[1]}" if blk else "per-tensor"
        fmt = f", scale_fmt {self.scale_fmt}" if self.scale_fmt else ""
        return f"fp8 {kind}{fmt}, {len(self.ignored)} ignored layers"


@lru_cache(maxsize=64)
def _fp8_scheme(
    weight_block_size: tuple[int, int] | None, scale_fmt: str | None, activation_scheme: str
) -> Scheme:
    """Built once per distinct config (a checkpoint resolves tens of thousands of modules)."""
    source, rule = DeepSeekFp8Config.source, ""
    if weight_block_size is not None:
        ue8m0 = scale_fmt == "ue8m0"
        return fp8_block_scheme(
            weight_block_size,
            scale_suffix="weight_scale_inv",
            scale_dtypes=("F32", "F8_E8M0") if ue8m0 else ("F32",),
            e8m0=ue8m0,
            source=source,
            rule=rule,
        )
    static = activation_scheme == "static"
    return Scheme(
        format=WeightFormat.FP8_PER_TENSOR,
        weight_dtypes=("F8_E4M3",),
        scale_suffix="weight_scale",
        scale_dtypes=("F32",),
        input_scale_suffix="input_scale" if static else None,
        input_scale_dtypes=("F32",) if static else (),
        activation=activation_scheme,
        source=source,
        rule=rule,
    )


@lru_cache(maxsize=4096)
def _fp8_scheme_with_rule(
    weight_block_size: tuple[int, int] | None,
    scale_fmt: str | None,
    activation_scheme: str,
    rule: str,
) -> Scheme:
    return with_rule(_fp8_scheme(weight_block_size, scale_fmt, activation_scheme), rule)
