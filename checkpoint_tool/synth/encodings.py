"""How each producer stores one linear: tensor suffixes, safetensors dtypes, shapes, codec.

An ``Encoding`` turns a logical ``[out, in]`` weight into storage tensors. Names and dtypes
follow the producers (FORMATS.md sections 2-5): DeepSeek native block FP8 writes
``weight_scale_inv`` (F32), Quark writes ``weight_scale`` (F32 per block, BF16 per tensor or
channel, U8 for MX), ModelOpt NVFP4 writes ``input_scale`` where Quark writes
``input_scale_2``, DeepSeek-V4 writes a sibling ``scale`` in F8_E8M0 and packs FP4 as I8.

Example::

    ENCODINGS["quark_mxfp4"].tensors("model.layers.1.mlp.experts.0.down_proj", 256, 128)
    # [("...down_proj.weight", "U8", (256, 64), "weight"),
    #  ("...down_proj.weight_scale", "U8", (256, 4), "scale")]
"""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint_tool.quant.scheme import WeightFormat


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Part:
    """One storage tensor of an encoding: codec role, name suffix, safetensors dtype, shape kind.

    ``shape`` kinds: ``full`` [out, in], ``packed`` [out, in/2], ``group:N`` [out, in/N],
    ``block:N`` [ceil(out/N), ceil(in/N)], ``rows`` [out], ``scalar`` [].
    """

    role: str
    suffix: str
    dtype: str
    shape: str

    def shape_for(self, out: int, inp: int) -> tuple[int, ...]:
        kind, _, arg = self.shape.partition(":")
        if kind == "full":
            return (out, inp)
        if kind == "packed":
            return (out, inp // 2)
        if kind == "group":
            return (out, inp // int(arg))
        if kind == "block":
            return (_ceil(out, int(arg)), _ceil(inp, int(arg)))
        if kind == "rows":
            return (out,)
        if kind == "scalar":
            return ()
        raise ValueError(f"unknown part shape {self.shape!r}")


@dataclass(frozen=True)
class Encoding:
    """A producer's storage of one linear; ``format`` and codec options pick the codec.

    ``in_multiple`` is the granularity the input dim must have (packing / scale groups);
    ``group_quant`` says whether gate/up of one MLP share their global scales (NVFP4).
    """

    key: str
    format: WeightFormat
    parts: tuple[Part, ...]
    block: tuple[int, int] | None = None
    group_size: int | None = None
    scale_dtype: str | None = None
    in_multiple: int = 1
    group_quant: bool = False

    @property
    def quantized(self) -> bool:
        return self.format is not WeightFormat.UNQUANTIZED

    def tensors(self, module: str, out: int, inp: int) -> list[tuple[str, str, tuple, str]]:
        """``(name, dtype, shape, role)`` of every storage tensor of ``module``."""
        key = (self.key, out, inp)
        parts = _PARTS_CACHE.get(key)
        if parts is None:
            parts = tuple((p.suffix, p.dtype, p.shape_for(out, inp), p.role) for p in self.parts)
            _PARTS_CACHE[key] = parts
        return [(f"{module}.{sfx}", dt, shape, role) for sfx, dt, shape, role in parts]


#: (encoding key, out, in) -> storage parts; layouts repeat a few shapes many thousand times
_PARTS_CACHE: dict[tuple[str, int, int], tuple[tuple[str, str, tuple, str], ...]] = {}

_W_BF16 = Part("weight", "weight", "BF16", "full")
_W_FP8 = Part("weight", "weight", "F8_E4M3", "full")
_W_FP4_U8 = Part("weight", "weight", "U8", "packed")
_W_FP4_I8 = Part("weight", "weight", "I8", "packed")

ENCODINGS: dict[str, Encoding] = {
    e.key: e
    for e in (
        Encoding("bf16", WeightFormat.UNQUANTIZED, (_W_BF16,)),
        # DeepSeek-V3/R1 native: block scales are multipliers despite the _inv name
        Encoding(
            "deepseek_fp8_block",
            WeightFormat.FP8_BLOCK,
            (_W_FP8, Part("scale", "weight_scale_inv", "F32", "block:128")),
            block=(128, 128),
            scale_dtype="F32",
        ),
        # quant_method fp8 without weight_block_size: vLLM Fp8Config per-tensor names
        Encoding(
            "deepseek_fp8_tensor",
            WeightFormat.FP8_PER_TENSOR,
            (_W_FP8, Part("scale", "weight_scale", "F32", "scalar")),
            scale_dtype="F32",
        ),
        Encoding(
            "quark_fp8_block",
            WeightFormat.FP8_BLOCK,
            (_W_FP8, Part("scale", "weight_scale", "F32", "block:128")),
            block=(128, 128),
            scale_dtype="F32",
        ),
        Encoding(
            "quark_fp8_tensor",
            WeightFormat.FP8_PER_TENSOR,
            (
                _W_FP8,
                Part("scale", "weight_scale", "BF16", "scalar"),
                Part("input_scale", "input_scale", "BF16", "scalar"),
            ),
            scale_dtype="BF16",
        ),
        Encoding(
            "quark_fp8_channel",
            WeightFormat.FP8_PER_CHANNEL,
            (_W_FP8, Part("scale", "weight_scale", "BF16", "rows")),
            scale_dtype="BF16",
        ),
        Encoding(
            "quark_mxfp4",
            WeightFormat.MXFP4,
            (_W_FP4_U8, Part("scale", "weight_scale", "U8", "group:32")),
            group_size=32,
            scale_dtype="U8",
            in_multiple=32,
        ),
        Encoding(
            "quark_nvfp4",
            WeightFormat.NVFP4,
            (
                _W_FP4_U8,
                Part("scale", "weight_scale", "F8_E4M3", "group:16"),
                Part("global_scale", "weight_scale_2", "F32", "scalar"),
                Part("input_scale", "input_scale_2", "F32", "scalar"),
            ),
            group_size=16,
            scale_dtype="F8_E4M3",
            in_multiple=16,
            group_quant=True,
        ),
        Encoding(
            "modelopt_nvfp4",
            WeightFormat.NVFP4,
            (
                _W_FP4_U8,
                Part("scale", "weight_scale", "F8_E4M3", "group:16"),
                Part("global_scale", "weight_scale_2", "F32", "scalar"),
                Part("input_scale", "input_scale", "F32", "scalar"),
            ),
            group_size=16,
            scale_dtype="F8_E4M3",
            in_multiple=16,
            group_quant=True,
        ),
        # DeepSeek-V4: FP8 block linears with ue8m0 (F8_E8M0) block scales in `.scale`
        Encoding(
            "deepseek_v4_fp8_block",
            WeightFormat.FP8_BLOCK,
            (_W_FP8, Part("scale", "scale", "F8_E8M0", "block:128")),
            block=(128, 128),
            scale_dtype="F8_E8M0",
        ),
        # DeepSeek-V4 FP4 experts: E2M1 pairs packed in I8, E8M0 scale per 32 in `.scale`
        Encoding(
            "deepseek_v4_mxfp4",
            WeightFormat.MXFP4,
            (_W_FP4_I8, Part("scale", "scale", "F8_E8M0", "group:32")),
            group_size=32,
            scale_dtype="F8_E8M0",
            in_multiple=32,
        ),
        # DeepSeek-V4.1 engram tables: FP8 rows, E8M0 scale per 32 columns
        Encoding(
            "deepseek_v4_engram",
            WeightFormat.MXFP8,
            (_W_FP8, Part("scale", "scale", "F8_E8M0", "group:32")),
            group_size=32,
            scale_dtype="F8_E8M0",
            in_multiple=32,
        ),
    )
}
