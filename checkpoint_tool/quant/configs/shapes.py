"""The sibling tensors a scheme expects next to a weight, with their shapes and dtypes.

Shapes come from the weight's *logical* shape (packed FP4 ``U8``/``I8`` ``[out, in/2]`` ->
``[out, in]``; an ``F4`` header already records the logical shape). Uses the codecs'
``storage_shapes`` when ``checkpoint_tool.quant.codecs`` provides it, and the formulas of
FORMATS.md §2 otherwise.

Example::

    expected_siblings(mxfp4, "U8", (192, 128))
    # {'weight_scale': Expected(role='scale', shapes=[(192, 8)], dtypes=('U8',))}
"""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint_tool.quant.scheme import Scheme, WeightFormat

PACKED_FP4 = (WeightFormat.MXFP4, WeightFormat.NVFP4)
_SCALAR = [(), (1,)]


@dataclass(frozen=True)
class Expected:
    """One expected sibling: its role, accepted shapes (first = canonical) and dtypes."""

    role: str
    shapes: list[tuple[int, ...]]
    dtypes: tuple[str, ...]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def logical_shape(scheme: Scheme, dtype: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Unpacked ``[..., out, in]`` of a stored weight."""
    if scheme.format in PACKED_FP4 and dtype in ("U8", "I8") and shape:
        return (*shape[:-1], shape[-1] * 2)
    return tuple(shape)


def _codec_scale_shapes(scheme: Scheme, logical: tuple[int, ...]) -> dict[str, tuple] | None:
    try:
        from checkpoint_tool.quant.codecs import get_codec
    except ImportError:
        return None
    try:
        shapes = get_codec(scheme).storage_shapes(logical)
    except Exception:  # codec refuses this shape/scheme: fall back to the formulas
        return None
    return {role: tuple(s) for role, s in shapes.items()}


def _formula_scale_shape(scheme: Scheme, logical: tuple[int, ...]) -> list[tuple[int, ...]]:
    *lead, out, inp = logical if len(logical) >= 2 else (1, *logical)
    lead = tuple(lead)
    fmt = scheme.format
    if fmt is WeightFormat.FP8_PER_TENSOR:
        return list(_SCALAR) if not lead else [lead, (*lead, 1)]
    if fmt is WeightFormat.FP8_PER_CHANNEL:
        return [(*lead, out), (*lead, out, 1)]
    if fmt is WeightFormat.FP8_BLOCK and scheme.block:
        b0, b1 = scheme.block
        return [(*lead, _ceil(out, b0), _ceil(inp, b1))]
    group = scheme.group_size or 32
    return [(*lead, out, _ceil(inp, group))]


def expected_siblings(
    scheme: Scheme, weight_dtype: str, weight_shape: tuple[int, ...]
) -> dict[str, Expected]:
    """Suffix -> ``Expected`` for every tensor ``scheme`` stores next to the weight."""
    if not scheme.quantized or scheme.format is WeightFormat.UNSUPPORTED:
        return {}
    key = (
        scheme.format,
        scheme.block,
        scheme.group_size,
        scheme.scale_suffix,
        scheme.scale_dtypes,
        scheme.scale_is_e8m0,
        scheme.global_scale_suffix,
        scheme.input_scale_suffix,
        scheme.input_scale_dtypes,
        _scale_mode(scheme.spec),
    )
    full = (key, weight_dtype, tuple(weight_shape))
    hit = _MEMO.get(full)
    if hit is None:
        if len(_MEMO) > 4096:
            _MEMO.clear()
        hit = _MEMO[full] = _expected(scheme, weight_dtype, tuple(weight_shape))
    return dict(hit)


def _scale_mode(spec: object) -> str:
    return repr(spec) if spec is not None else ""


#: (storage facts of a scheme, weight dtype, weight shape) -> expected siblings; thousands of
#: experts share a handful of shapes, so a catalog resolves each only once
_MEMO: dict[tuple, dict[str, Expected]] = {}


def _expected(
    scheme: Scheme, weight_dtype: str, weight_shape: tuple[int, ...]
) -> dict[str, Expected]:
    logical = logical_shape(scheme, weight_dtype, tuple(weight_shape))
    out: dict[str, Expected] = {}
    if scheme.scale_suffix:
        shapes = _formula_scale_shape(scheme, logical)
        codec = _codec_scale_shapes(scheme, logical)
        if codec and "scale" in codec:
            # the codec is the authority; the formulas only add harmless spellings ([1], [out, 1])
            shapes = [codec["scale"], *(s for s in shapes[1:] if s != codec["scale"])]
        out[scheme.scale_suffix] = Expected("scale", shapes, scheme.scale_dtypes)
    if scheme.global_scale_suffix:
        out[scheme.global_scale_suffix] = Expected("global_scale", list(_SCALAR), ("F32",))
    if scheme.input_scale_suffix:
        dtypes = scheme.input_scale_dtypes or ("F32", "BF16", "F16")
        out[scheme.input_scale_suffix] = Expected("input_scale", list(_SCALAR), dtypes)
    return out
