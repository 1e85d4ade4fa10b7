"""ckpt's own FSE checks: can the stored shared expert(s) really become routed slots?

vLLM's gates (``fse_gates``) look at the quantization *config*. These look at what the
checkpoint *stores* and at the slot geometry, with reasons in ckpt's words:

- the routed and shared experts must be stored in the same scheme (format, block/group,
  scale encoding) -- e.g. Quark leaves 3-D fused routed experts BF16 while the config
  says MXFP4;
- each shared chunk becomes one routed expert, so ``shared_intermediate / n_shared`` must
  equal the routed width;
- with ``n_shared > 1`` the shared MLP is split in chunks (gate/up on rows, down on
  columns): each chunk must be a whole number of quant blocks/groups, and the scales must
  be splittable along that dim (0-d per-tensor scales and per-channel down scales are not).

Example::

    layout_check(layer, routed={"gate": mx, "up": mx, "down": mx},
                 shared={"gate": fp8, "up": fp8, "down": fp8})
    # GateResult(compatible=False, code='stored_schemes_differ', ...)
"""

from __future__ import annotations

from collections.abc import Mapping

from checkpoint_tool.formats import format_of
from checkpoint_tool.model import MoeLayerFacts
from checkpoint_tool.policy.fse_gates import OK, GateResult
from checkpoint_tool.policy.tp import split_alignment
from checkpoint_tool.quant.scheme import Scheme

CKPT_REASONS: dict[str, str] = {
    "shared_tensors_missing": "shared expert tensors are missing at {prefix}",
    "stored_schemes_differ": (
        "routed experts are stored as {routed} but shared experts as {shared} at {prefix}"
    ),
    "width_mismatch": (
        "shared expert width {chunk} ({shared_i} / {n_shared}) differs from the routed "
        "expert width {moe_i} at {prefix}"
    ),
    "chunks_uneven": (
        "shared intermediate size {shared_i} does not split into {n_shared} equal experts "
        "at {prefix}"
    ),
    "chunk_misaligned": (
        "each of the {n_shared} shared-expert chunks at {prefix} is {chunk} wide, not a "
        "multiple of {alignment} ({why})"
    ),
    "scale_not_splittable": (
        "{scheme} scales of the shared experts at {prefix} cannot be split into "
        "{n_shared} routed expert slots; chunking needs block- or group-quantized experts"
    ),
}


def _no(code: str, **params: object) -> GateResult:
    return GateResult(False, code, CKPT_REASONS[code], {k: str(v) for k, v in params.items()})


def layout_check(
    layer: MoeLayerFacts, routed: Mapping[str, Scheme], shared: Mapping[str, Scheme]
) -> GateResult:
    """ckpt's verdict on turning ``layer``'s stored shared expert(s) into routed slots."""
    prefix = layer.shared_prefix or ""
    if not shared:
        return _no("shared_tensors_missing", prefix=prefix)
    # what must agree for two experts to share one grouped GEMM: what their bytes are
    r_keys = {s.storage_identity() for s in routed.values()}
    s_keys = {s.storage_identity() for s in shared.values()}
    if len(r_keys | s_keys) > 1:
        return _no(
            "stored_schemes_differ",
            routed=_label(routed),
            shared=_label(shared),
            prefix=prefix,
        )
    n, shared_i = layer.n_shared, layer.shared_intermediate_size
    if shared_i % n:
        return _no("chunks_uneven", shared_i=shared_i, n_shared=n, prefix=prefix)
    chunk = shared_i // n
    if chunk != layer.moe_intermediate_size:
        return _no(
            "width_mismatch",
            chunk=chunk,
            shared_i=shared_i,
            n_shared=n,
            moe_i=layer.moe_intermediate_size,
            prefix=prefix,
        )
    if n > 1:
        for proj, scheme in shared.items():
            # 0-d per-tensor scales and NVFP4's weight_scale_2 do not cut, nor per-channel
            # (down's scale is per output row): ``Format.splits_scales``
            if not format_of(scheme).splits_scales:
                return _no("scale_not_splittable", scheme=scheme.short(), n_shared=n, prefix=prefix)
            alignment, why = split_alignment(scheme, proj)
            if chunk % alignment:
                return _no(
                    "chunk_misaligned",
                    n_shared=n,
                    prefix=prefix,
                    chunk=chunk,
                    alignment=alignment,
                    why=why,
                )
    return OK


def _label(schemes: Mapping[str, Scheme]) -> str:
    labels = sorted({s.short() for s in schemes.values()})
    return "/".join(labels)
