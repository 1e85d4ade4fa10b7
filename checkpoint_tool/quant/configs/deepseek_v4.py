"""DeepSeek-V4 native checkpoints: ``expert_dtype`` + block-FP8 ``quantization_config``.

Names are DeepSeek's own (``layers.N.ffn.experts.E.w1|w2|w3``, ``layers.N.attn.wq_a``,
``mtp.K.*``) and every scale is a sibling ``X.scale``. As vLLM's ``DeepseekV4FP8Config`` reads
them:

- routed experts, ``expert_dtype: "fp4"`` (V4-Flash): MXFP4, weight I8/U8 ``[out, in/2]``,
  ``scale`` F8_E8M0 ``[out, in/32]``; ``"fp8"`` (Flash-Base): block FP8 with F32 ``scale``;
- every other quantized linear (attention, shared experts): block FP8 ``weight_block_size``
  with ``scale`` F8_E8M0 (ue8m0) when experts are fp4, F32 when experts are fp8;
- ``ignored_layers`` as in ``Fp8Config``. Linears DeepSeek stores in float (no ``.scale``) are
  resolved by ``resolve_catalog``.

A converted checkpoint (``ckpt convert`` with the ``deepseek-v4-amd`` recipe) holds the names
vLLM's loader maps them to (vLLM 0.33 ``models/deepseek_v4/amd/model.py``
``_make_deepseek_v4_weights_mapper``): ``layers.`` / ``embed.`` / ``norm.`` under ``model.``
and, with them, ``.scale`` -> ``.weight_scale`` for fp4 routed experts
(``experts.E.wK``, ``Mxfp4MoEMethod``) and ``.weight_scale_inv`` for everything else. A module
under ``model.`` is read with those spellings (``scale_suffix``); ``mtp.*`` keeps DeepSeek's
(the drafter reads them under their own names).

Example config.json fields::

    {"model_type": "deepseek_v4", "expert_dtype": "fp4",
     "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
                             "scale_fmt": "ue8m0", "activation_scheme": "dynamic"}}
"""

from __future__ import annotations

from typing import ClassVar, Literal

from checkpoint_tool.quant.configs.base import fp8_block_scheme, mxfp4_scheme, mxfp8_scheme
from checkpoint_tool.quant.configs.deepseek_fp8 import Fp8LayerSkips
from checkpoint_tool.quant.configs.names import expert_parts
from checkpoint_tool.quant.scheme import Scheme


class DeepSeekV4Config(Fp8LayerSkips):
    """DeepSeek-V4 quantization: the FP8 block config plus config.json's ``expert_dtype``."""

    source: ClassVar[str] = "deepseek_v4"

    quant_method: Literal["fp8", "deepseek_v4_fp8"] = "fp8"
    expert_dtype: Literal["fp4", "fp8"] = "fp4"
    weight_block_size: tuple[int, int] = (128, 128)
    scale_fmt: str | None = None
    activation_scheme: Literal["dynamic"] = "dynamic"
    fmt: str = "e4m3"

    @staticmethod
    def mapped(module: str) -> bool:
        """Whether ``module`` carries the names after vLLM's mapper (see the module docstring)."""
        return module.startswith("model.")

    def scale_suffix(self, module: str, *, expert: bool) -> str:
        """``scale`` (DeepSeek's) or the mapped spelling of ``module``'s scale."""
        if not self.mapped(module):
            return "scale"
        return "weight_scale" if expert and self.expert_dtype == "fp4" else "weight_scale_inv"

    def linear_scheme(self, rule: str, module: str = "") -> Scheme:
        """Block FP8 for attention / shared-expert linears (e8m0 scales with fp4 experts)."""
        e8m0 = self.expert_dtype == "fp4"
        return fp8_block_scheme(
            self.weight_block_size,
            scale_suffix=self.scale_suffix(module, expert=False),
            scale_dtypes=("F8_E8M0", "U8") if e8m0 else ("F32",),
            e8m0=e8m0,
            source=self.source,
            rule=rule,
        )

    def expert_scheme(self, rule: str, module: str = "") -> Scheme:
        suffix = self.scale_suffix(module, expert=True)
        if self.expert_dtype == "fp4":
            return mxfp4_scheme(
                source=self.source,
                rule=rule,
                scale_suffix=suffix,
                weight_dtypes=("I8", "U8", "F4"),
                scale_dtypes=("F8_E8M0", "U8"),
            )
        return fp8_block_scheme(
            self.weight_block_size,
            scale_suffix=suffix,
            scale_dtypes=("F32",),
            e8m0=False,
            source=self.source,
            rule=rule,
        )

    def table_scheme_for(self, module: str) -> Scheme | None:
        """Quantized lookup tables that are not linears: the DeepSeek-V4.1 engram embedding.

        ``engram.embed.weight`` holds FP8 E4M3 rows with one E8M0 scale per 32 columns
        (``engram.embed.scale``, or ``weight_scale`` in Quark's spelling): an MXFP8 layout.
        """
        if module.endswith("engram.embed") or module.endswith("engram.embed_tokens"):
            return mxfp8_scheme(
                source=self.source,
                rule="engram embedding table: FP8 rows, E8M0 scale per 32 columns",
                scale_suffix=self.scale_suffix(module, expert=False),
                scale_dtypes=("F8_E8M0", "U8"),
                activation=None,
            )
        return None

    def moe_scheme(self, layer: str) -> Scheme:
        return self.expert_scheme(f"expert_dtype {self.expert_dtype} (FusedMoE {layer!r})", layer)

    def linear_scheme_for(self, module: str) -> Scheme:
        return self.linear_scheme(
            f"quant_method fp8, weight_block_size {self.weight_block_size}", module
        )

    def producer_scheme_for(self, module: str) -> Scheme:
        if (skipped := self.skipped(module)) is not None:
            return skipped
        if expert_parts(module) is not None:
            return self.expert_scheme(f"expert_dtype {self.expert_dtype}", module)
        return self.linear_scheme_for(module)

    def summary(self) -> str:
        b = self.weight_block_size
        return f"deepseek_v4: experts {self.expert_dtype}, linears fp8 block {b[0]}x{b[1]}"
