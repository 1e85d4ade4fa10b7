"""Per-rank parameter names' shapes, from a site, a quant scheme and the TP size.

The engine allocates each parameter from logical sizes (``create_weights``); the storage
shape of every role then follows from the format's codec (packed FP4 bytes, ceil-shaped group
and block scales). Per-tensor values (0-d) become one entry per merged shard in a linear,
``[E, 2]`` (gate, up) or ``[E]`` in the routed experts. Shapes are storage shapes
(``catalog.safetensors_format.storage_shape``): what the bytes are, whatever dtype header a file records.

Example (Quark MXFP4 o_proj, hidden 7168, 128 heads x v_head 128, TP 8)::

    linear_shapes(site, scheme, codec, tp=8, params=["weight", "weight_scale"])
    # {'weight': (7168, 1024), 'weight_scale': (7168, 64)}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from checkpoint_tool.errors import AlignmentError, UsageError
from checkpoint_tool.quant import roles
from checkpoint_tool.quant.roles import Role
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.targets.instance import LinearSite, MoeSite, VocabSite
from checkpoint_tool.targets.spec import SchemeParams, TargetSpec

if TYPE_CHECKING:
    from checkpoint_tool.quant.storage import StorageFormat

#: parameter suffix -> codec role for the weight and its scales, read off the one table
#: (``quant.roles``): the suffixes the target specs name. Not the bare ``scale`` (DeepSeek-V4's
#: checkpoint spelling, no spec parameter) nor biases (no quantization parameters): a layout
#: refuses a module that stores a suffix of this table its scheme does not register.
ROLE_BY_SUFFIX: dict[str, Role] = {
    suffix: role
    for suffix, role in roles.ROLE_BY_SUFFIX.items()
    if role in ("weight", *roles.SCALE_ROLES) and suffix != "scale"
}


def scheme_key(scheme: Scheme) -> str:
    """``quark/mxfp4``, ``deepseek_fp8/fp8_block``, ...; ``unquantized`` for any config."""
    if not scheme.quantized:
        return "unquantized"
    return f"{scheme.source}/{scheme.format.value}"


def scheme_params(spec: TargetSpec, scheme: Scheme, where: str) -> SchemeParams:
    """The spec's parameter list for ``scheme``; UsageError naming ``where`` if unsupported."""
    params = spec.scheme_params(scheme_key(scheme))
    if params is None:
        raise UsageError(
            f"{where}: quantization {scheme_key(scheme)} ({scheme.rule}) has no parameter list in "
            f"the {spec.target} spec (supported: {', '.join(sorted(spec.schemes))}); use --layout hf"
        )
    return params


def required(params: SchemeParams, scheme: Scheme, kind: str) -> list[str]:
    """Parameter suffixes a ``linear`` / ``moe`` of ``scheme`` registers."""
    names = list(params.linear if kind == "linear" else params.moe)
    if scheme.activation == "static":
        names += [p for p in params.static if p not in names]
    return names


def _divide(n: int, tp: int, what: str) -> int:
    if n % tp:
        raise AlignmentError(
            f"{what}: size {n} does not split over --tp {tp} (the engine divides it evenly); "
            "choose a --tp that divides it"
        )
    return n // tp


def _role_shapes(codec: StorageFormat, logical: tuple[int, ...], what: str) -> dict[str, tuple[int, ...]]:
    try:
        return dict(codec.storage_shapes(logical))
    except Exception as exc:  # InputError from packed sizes
        raise AlignmentError(f"{what}: {exc}") from None


def linear_logical(site: LinearSite, tp: int) -> tuple[int, int]:
    """Logical ``(out, in)`` of one rank's share of ``site``."""
    if site.parallel == "column":
        for (shard, _), units in zip(site.shards, site.units, strict=False):
            if units is not None and units % tp:
                raise AlignmentError(
                    f"{shard}: {units} heads do not split over --tp {tp} (vLLM replicates KV "
                    "heads when tp exceeds them, which ckpt does not write); choose a --tp that "
                    "divides them or use --layout hf"
                )
        out = sum(_divide(n, tp, f"{shard} rows") for shard, n in site.shards)
        return out, site.in_
    if site.parallel == "row":
        return site.out, _divide(site.in_, tp, f"{site.vllm} input columns")
    return site.out, site.in_


def linear_shapes(
    site: LinearSite, codec: StorageFormat, tp: int, params: Iterable[str]
) -> dict[str, tuple[int, ...]]:
    """Per-rank storage shape of each of ``params`` of linear ``site``."""
    roles = _role_shapes(codec, linear_logical(site, tp), site.vllm)
    out: dict[str, tuple[int, ...]] = {}
    for p in params:
        role = ROLE_BY_SUFFIX.get(p, p)
        shape = roles.get(role, ())
        out[p] = shape if shape else (len(site.shards),)
    return out


def vocab_shape(site: VocabSite, padding: int, tp: int) -> tuple[int, int]:
    """Per-rank rows of the padded vocab, and the columns."""
    padded = -(-site.rows // padding) * padding
    return _divide(padded, tp, f"{site.vllm} padded vocab"), site.cols


def moe_intermediate(site: MoeSite, tp: int) -> int:
    return _divide(site.intermediate, tp, f"{site.vllm} moe_intermediate_size")


def moe_shapes(
    site: MoeSite,
    spec: TargetSpec,
    codec: StorageFormat,
    tp: int,
    params: Iterable[str],
    per_expert: Iterable[str],
) -> dict[str, tuple[int, ...]]:
    """Per-rank storage shape of every ``w13_*`` / ``w2_*`` parameter of ``site``."""
    i_r, h, e = moe_intermediate(site, tp), site.hidden, site.slots
    w13 = _role_shapes(codec, (2 * i_r, h), f"{site.vllm} w13")
    w2 = _role_shapes(codec, (h, i_r), f"{site.vllm} w2")
    single = set(per_expert)
    out: dict[str, tuple[int, ...]] = {}
    for p in params:
        role = ROLE_BY_SUFFIX.get(p, p)
        s13, s2 = w13.get(role, ()), w2.get(role, ())
        out[spec.moe.w13.format(param=p)] = (e, *s13) if s13 else ((e,) if p in single else (e, 2))
        out[spec.moe.w2.format(param=p)] = (e, *s2) if s2 else (e,)
    return out
