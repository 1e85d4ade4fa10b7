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

from checkpoint_tool.formats import format_of
from checkpoint_tool.quant.scheme import WeightFormat


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Part:
    """One storage tensor of an encoding: codec role, name suffix, safetensors dtype, shape kind.

    ``shape`` kinds: ``full`` [out, in], ``packed`` [out, in/2], ``group:N`` [out, in/N],
    ``block:N`` [ceil(out/N), ceil(in/N)], ``rows`` [out], ``scalar`` []; compressed-tensors'
    ``pack8`` [out, in/8] (I32 words), ``cgroup:N`` [out, ceil(in/N)], ``rows1`` [out, 1],
    ``one`` [1], ``pair`` [2].
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
        if kind == "cgroup":  # a partial last group has its own scale
            return (out, _ceil(inp, int(arg)))
        if kind == "pack8":
            return (out, inp // 8)
        if kind == "rows1":
            return (out, 1)
        if kind == "one":
            return (1,)
        if kind == "pair":
            return (2,)
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
    #: further ``codec_for_format`` options, e.g. (("symmetric", False),)
    codec_options: tuple[tuple[str, object], ...] = ()

    @property
    def quantized(self) -> bool:
        return format_of(self.format).quantized

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

# One row per encoding: the weight's dtype, its scale (suffix, dtype, shape) and its activation
# scale (suffix:dtype, a scalar). The rest follows from the format (``Format.weight_pack``,
# ``synth_parts``, ``shares_global_scale``) and the scale's shape: FP4 weights are packed two per
# byte; NVFP4 adds the F32 per-tensor ``weight_scale_2`` and shares it between gate and up; ``block:N`` scales make an N x N block; ``group:N`` scales a group of
# N and an input dim in whole groups. Notes:
# - deepseek_fp8_block: DeepSeek-V3/R1 native, block scales are multipliers despite the _inv name;
# - deepseek_fp8_tensor: quant_method fp8 without weight_block_size (vLLM Fp8Config names);
# - deepseek_v4_*: FP8 block linears with ue8m0 (F8_E8M0) block scales in ``.scale``; FP4
#   experts as E2M1 pairs packed in I8 with an E8M0 scale per 32; DeepSeek-V4.1 engram tables
#   as FP8 rows with an E8M0 scale per 32 columns.
_TABLE = """
key                   format          weight  scale            dtype   shape     input_scale
bf16                  UNQUANTIZED     BF16    .                .       .         .
deepseek_fp8_block    FP8_BLOCK       F8_E4M3 weight_scale_inv F32     block:128 .
deepseek_fp8_tensor   FP8_PER_TENSOR  F8_E4M3 weight_scale     F32     scalar    .
quark_fp8_block       FP8_BLOCK       F8_E4M3 weight_scale     F32     block:128 .
quark_fp8_tensor      FP8_PER_TENSOR  F8_E4M3 weight_scale     BF16    scalar    input_scale:BF16
quark_fp8_channel     FP8_PER_CHANNEL F8_E4M3 weight_scale     BF16    rows      .
quark_mxfp4           MXFP4           U8      weight_scale     U8      group:32  .
quark_nvfp4           NVFP4           U8      weight_scale     F8_E4M3 group:16  input_scale_2:F32
modelopt_nvfp4        NVFP4           U8      weight_scale     F8_E4M3 group:16  input_scale:F32
deepseek_v4_fp8_block FP8_BLOCK       F8_E4M3 scale            F8_E8M0 block:128 .
deepseek_v4_mxfp4     MXFP4           I8      scale            F8_E8M0 group:32  .
deepseek_v4_engram    MXFP8           F8_E4M3 scale            F8_E8M0 group:32  .
"""

def _encoding(
    key: str, fmt: str, weight: str, scale: str, dtype: str, shape: str, act: str
) -> Encoding:
    """One ``_TABLE`` row as an ``Encoding`` ("." for an absent cell).

    ``_encoding("quark_mxfp4", "MXFP4", "U8", "weight_scale", "U8", "group:32", ".")``
    -> packed U8 weight, U8 scale per 32, ``group_size=32``, ``in_multiple=32``.
    """
    weight_format = WeightFormat[fmt]
    stored = format_of(weight_format)
    parts = [Part("weight", "weight", weight, "packed" if stored.weight_pack == 2 else "full")]
    kind, _, n = shape.partition(":")
    if scale != ".":
        parts.append(Part("scale", scale, dtype, shape))
    parts.extend(Part(*extra) for extra in stored.synth_parts)
    if act != ".":
        suffix, act_dtype = act.split(":")
        parts.append(Part("input_scale", suffix, act_dtype, "scalar"))
    return Encoding(
        key,
        weight_format,
        tuple(parts),
        block=(int(n), int(n)) if kind == "block" else None,
        group_size=int(n) if kind == "group" else None,
        scale_dtype=None if dtype == "." else dtype,
        in_multiple=int(n) if kind == "group" else 1,
        group_quant=stored.shares_global_scale,
    )


ENCODINGS: dict[str, Encoding] = {
    row[0]: _encoding(*row) for row in (line.split() for line in _TABLE.strip().splitlines()[1:])
}


def _ct(key: str, fmt: WeightFormat, parts: list[Part], **kw: object) -> Encoding:
    return Encoding(key, fmt, tuple(parts), **kw)  # type: ignore[arg-type]


#: compressed-tensors (llm-compressor) serializations, in the model dtype BF16
#: (``quant.configs.compressed_tensors`` has the layouts): FP8 per channel / per 128 block,
#: INT4 ``pack-quantized`` groups of 32 (Kimi-K2-Thinking) or 128 (RedHatAI w4a16) with the
#: ``weight_shape`` record, NVFP4 with ``weight_global_scale`` / ``input_global_scale`` [1]
#: shared by gate and up (llm-compressor fuses the global scales of one MLP's gate and up)
CT_ENCODINGS = {
    e.key: e
    for e in (
        _ct(
            "ct_fp8_channel",
            WeightFormat.FP8_PER_CHANNEL,
            [
                Part("weight", "weight", "F8_E4M3", "full"),
                Part("scale", "weight_scale", "BF16", "rows1"),
            ],
            scale_dtype="BF16",
        ),
        _ct(
            "ct_fp8_block",
            WeightFormat.FP8_BLOCK,
            [
                Part("weight", "weight", "F8_E4M3", "full"),
                Part("scale", "weight_scale", "BF16", "block:128"),
            ],
            block=(128, 128),
            scale_dtype="BF16",
        ),
        *(
            _ct(
                f"ct_int4_g{g}",
                WeightFormat.INT4,
                [
                    Part("weight", "weight_packed", "I32", "pack8"),
                    Part("scale", "weight_scale", "BF16", f"cgroup:{g}"),
                    Part("shape", "weight_shape", "I64", "pair"),
                ],
                group_size=g,
                scale_dtype="BF16",
                in_multiple=8,  # whole words; a partial last group has its own scale
            )
            for g in (32, 128)
        ),
        _ct(
            "ct_nvfp4",
            WeightFormat.NVFP4,
            [
                Part("weight", "weight_packed", "U8", "packed"),
                Part("scale", "weight_scale", "F8_E4M3", "group:16"),
                Part("global_scale", "weight_global_scale", "F32", "one"),
                Part("input_scale", "input_global_scale", "F32", "one"),
            ],
            group_size=16,
            scale_dtype="F8_E4M3",
            in_multiple=16,
            group_quant=True,
            codec_options=(("global_scale_divides", True),),
        ),
    )
}
ENCODINGS.update(CT_ENCODINGS)
