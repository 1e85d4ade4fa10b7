"""The sibling tensors a scheme expects next to a weight, with their shapes and dtypes.

Shapes come from the weight's *logical* shape (packed FP4 ``U8``/``I8`` ``[out, in/2]`` ->
``[out, in]``; an ``F4`` header already records the logical shape). The shapes are the
format's (``quant.storage``: ``storage_shapes`` and the ``accepted_shapes`` spellings such as
``[out, 1]`` for per-channel scales); no torch is imported.

Example::

    expected_siblings(mxfp4, "U8", (192, 128))
    # {'weight_scale': Expected(role='scale', shapes=[(192, 8)], dtypes=('U8',))}
"""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats import format_of
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.quant.storage import get_storage_format

_SCALAR = [(), (1,)]


@dataclass(frozen=True)
class Expected:
    """One expected sibling: its role, accepted shapes (first = canonical) and dtypes."""

    role: str
    shapes: list[tuple[int, ...]]
    dtypes: tuple[str, ...]


def logical_shape(scheme: Scheme, dtype: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Unpacked ``[..., out, in]`` of a stored weight (``Format.logical_shape``)."""
    return format_of(scheme).logical_shape(dtype, tuple(shape))


def _scale_shapes(
    scheme: Scheme, logical: tuple[int, ...], role: str = "scale"
) -> list[tuple[int, ...]]:
    """Accepted shapes of ``role``, canonical first; none if the format refuses the weight's
    shape (``weight_shape_problem`` says why)."""
    try:
        fmt = get_storage_format(scheme)
        want = fmt.storage_shapes(logical)[role]
    except InputError:
        return []
    return fmt.accepted_shapes(role, want)


def weight_shape_problem(scheme: Scheme, weight_dtype: str, shape: tuple[int, ...]) -> str | None:
    """Why ``scheme`` cannot store a weight of this shape (too few dims, odd packed size), or
    None."""
    if not scheme.quantized or not format_of(scheme).decodable:
        return None
    try:
        get_storage_format(scheme).storage_shapes(logical_shape(scheme, weight_dtype, shape))
    except InputError as exc:
        return str(exc)
    return None


def expected_siblings(
    scheme: Scheme, weight_dtype: str, weight_shape: tuple[int, ...]
) -> dict[str, Expected]:
    """Suffix -> ``Expected`` for every tensor ``scheme`` stores next to the weight."""
    if not scheme.quantized or not format_of(scheme).decodable:
        return {}
    # what the scheme stores and names, with the input scale's dtypes: all _expected reads
    full = (scheme.siblings_key, weight_dtype, tuple(weight_shape))
    hit = _MEMO.get(full)
    if hit is None:
        if len(_MEMO) > 4096:
            _MEMO.clear()
        hit = _MEMO[full] = _expected(scheme, weight_dtype, tuple(weight_shape))
    return dict(hit)


#: (storage facts of a scheme, weight dtype, weight shape) -> expected siblings; thousands of
#: experts share a handful of shapes, so a catalog resolves each only once
_MEMO: dict[tuple, dict[str, Expected]] = {}


def _expected(
    scheme: Scheme, weight_dtype: str, weight_shape: tuple[int, ...]
) -> dict[str, Expected]:
    logical = logical_shape(scheme, weight_dtype, tuple(weight_shape))
    out: dict[str, Expected] = {}
    if scheme.scale_suffix:
        out[scheme.scale_suffix] = Expected(
            "scale", _scale_shapes(scheme, logical), scheme.scale_dtypes
        )
    if scheme.global_scale_suffix:
        out[scheme.global_scale_suffix] = Expected("global_scale", list(_SCALAR), ("F32",))
    if scheme.input_scale_suffix:
        dtypes = scheme.input_scale_dtypes or ("F32", "BF16", "F16")
        out[scheme.input_scale_suffix] = Expected("input_scale", list(_SCALAR), dtypes)
    if scheme.zero_point_suffix:
        shapes = _scale_shapes(scheme, logical, "zero_point")
        out[scheme.zero_point_suffix] = Expected("zero_point", shapes, ("I32",))
    return out
