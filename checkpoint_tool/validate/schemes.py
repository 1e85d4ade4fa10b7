"""Scheme rules: every weight and scale has the dtype and shape its quantization scheme implies.

The per-tensor comparison (weight dtype, scale dtype, scale shape from the codec's
``storage_shapes`` of the weight's logical shape) is done once, by
``checkpoint_tool.quant.resolve.resolve_catalog``; these rules report its findings under
their own ids so each CI testcase has one owner. ``expert_shapes`` adds what only the model
facts know: the experts of a layer agree with each other, with ``hidden_size`` and with the
widths config.json gives (``moe_intermediate_size`` for routed experts, MTP layers included;
the shared width for an unfused shared expert; a shared expert written into routed slots is
one routed expert wide). vLLM allocates every expert from config.json (the MTP drafter from the
same config: ``qwen3_next_mtp.py`` ``Qwen3NextMultiTokenPredictor`` builds
``Qwen3NextDecoderLayer(vllm_config, ...)``), so a tensor of another width does not load.

Example findings::

    error [scale_shape] model.layers.1.mlp.experts.0.gate_proj.weight_scale: shape [128, 3],
          but mxfp4/32 by vllm: global_quant_config needs [128, 8] for weight [128, 128] U8
    error [expert_shapes] model.layers.1.mlp.experts.2.down_proj.weight: U8[256, 32] differs
          from the 3 other experts of layer 1 (U8[256, 64])
    error [expert_shapes] mtp.layers.0.mlp.experts.0.gate_proj.weight: logical shape
          [512, 2048] is 512 wide but config.json gives the routed experts of MoE layer 48
          (MTP) 1024 (moe_intermediate_size); ...
"""

from __future__ import annotations

from collections import defaultdict

from checkpoint_tool.model import PROJS
from checkpoint_tool.report import Issue
from checkpoint_tool.validate.completeness import relayed, skip_sharded
from checkpoint_tool.validate.context import Unavailable, ValidationContext


def _fmt(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _issue(ctx: ValidationContext, name: str, message: str) -> Issue:
    e = ctx.catalog.tensors.get(name)
    return Issue(
        severity="error",
        rule="expert_shapes",
        tensor=name,
        file=e.file if e else None,
        message=message,
    )


def check_weight_dtype(ctx: ValidationContext) -> list[Issue]:
    """Each weight is stored in a dtype its scheme allows (packed FP4 as U8, FP8 as F8_E4M3)."""
    skip_sharded(ctx)
    return relayed(ctx, "weight_dtype")


def check_scale_dtype(ctx: ValidationContext) -> list[Issue]:
    """Each scale is stored in its scheme's dtype (E8M0 as U8/F8_E8M0, float as F32/BF16)."""
    skip_sharded(ctx)
    return relayed(ctx, "scale_dtype")


def check_scale_shape(ctx: ValidationContext) -> list[Issue]:
    """Each scale has the shape the codec derives from its weight's logical (unpacked) shape."""
    skip_sharded(ctx)
    return relayed(ctx, "scale_shape")


def _logical(ctx: ValidationContext, name: str) -> tuple[int, ...]:
    """Unpacked ``[..., out, in]`` of a stored weight (packed FP4 doubles the last dim)."""
    from checkpoint_tool.quant.configs.shapes import logical_shape

    entry = ctx.catalog.tensors[name]
    try:
        r = ctx.resolved().tensors.get(name)
    except Unavailable:
        r = None
    if r is None:
        return tuple(entry.shape)
    return tuple(logical_shape(r.scheme, entry.dtype, tuple(entry.shape)))


def check_expert_shapes(ctx: ValidationContext) -> list[Issue]:
    """Within each MoE layer, experts agree: same dtype and shape, hidden dims = hidden_size."""
    skip_sharded(ctx)
    facts = ctx.facts()
    tensors = ctx.catalog.tensors
    hidden = int(facts.hidden_size)
    out: list[Issue] = []
    for layer in facts.moe_layers:
        out.extend(_widths(ctx, layer))
        if layer.naming.routed_layout == "fused_3d":
            for p in ("gate", "down"):
                w = layer.routed_weight(0, p)
                if w in tensors:
                    axis = layer.naming.hidden_axis(p, three_d=True)
                    out.extend(_hidden(ctx, w, p == "down", hidden, layer.layer, axis))
            continue
        for p in PROJS:
            groups: dict[tuple, list[str]] = defaultdict(list)
            for e in range(int(layer.n_routed)):
                w = layer.routed_weight(e, p)
                if w in tensors:
                    groups[(tensors[w].dtype, tuple(tensors[w].shape))].append(w)
            if not groups:
                continue
            ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
            (common, members), odd = ranked[0], ranked[1:]
            for key, ws in odd:
                out.extend(
                    _issue(
                        ctx,
                        w,
                        f"{key[0]}{_fmt(key[1])} differs from the {len(members)} other experts "
                        f"of layer {layer.layer} ({common[0]}{_fmt(common[1])})",
                    )
                    for w in ws
                )
            out.extend(_hidden(ctx, members[0], p == "down", hidden, layer.layer))
    return out


def _width_issue(
    ctx: ValidationContext, name: str, proj: str, want: int, what: str, layer
) -> list[Issue]:
    """One finding when weight ``name`` (projection ``proj``) is not ``want`` wide."""
    if name not in ctx.catalog.tensors:
        return []
    logical = _logical(ctx, name)
    if len(logical) < 2:
        return []
    leaf = name.removesuffix(".weight").rsplit(".", 1)[-1]
    fused = proj != "down" and leaf == layer.naming.gate_up_name
    # gpt-oss: X.experts.gate_up_proj_blocks holds gate and up
    gpt_oss = layer.naming.fused_3d_weight is not None and layer.naming.routed_layout == "fused_3d"
    fused = fused or (gpt_oss and proj != "down" and name == layer.routed_weight(0, "gate"))
    got = layer.naming.intermediate_dim(proj, logical, fused_gate_up=fused)
    if got == want:
        return []
    mtp = " (MTP)" if layer.is_mtp else ""
    return [
        _issue(
            ctx,
            name,
            f"logical shape {_fmt(logical)} is {got} wide but config.json gives {what} of MoE "
            f"layer {layer.layer}{mtp} {want}; vLLM allocates the experts from config.json, so "
            "this does not load: fix config.json or re-convert (ckpt pads every MoE layer alike)",
        )
    ]


def _widths(ctx: ValidationContext, layer) -> list[Issue]:
    """Routed experts ``moe_intermediate_size`` wide (one tensor per projection checked: the
    experts agree with each other by the rule above); the shared expert as config.json says,
    or one routed expert wide where it sits in routed slots."""
    out: list[Issue] = []
    moe_i = int(layer.moe_intermediate_size)
    for p in ("gate", "down"):
        out.extend(
            _width_issue(ctx, layer.routed_weight(0, p), p, moe_i, "the routed experts", layer)
        )
    n_routed, n_shared = int(layer.n_routed), int(layer.n_shared or 0)
    if n_shared <= 0:
        return out
    if layer.naming.routed_layout != "fused_3d" and all(
        layer.routed_weight(n_routed + j, "gate") in ctx.catalog.tensors for j in range(n_shared)
    ):
        for k in range(n_shared):
            for p in ("gate", "down"):
                w = layer.routed_weight(n_routed + k, p)
                out.extend(_width_issue(ctx, w, p, moe_i, "a fused shared expert", layer))
        return out
    indexed = layer.naming.shared_layout == "indexed"
    want = layer.shared_chunk_size if indexed else int(layer.shared_intermediate_size)
    js: list[int | None] = list(range(n_shared)) if indexed else [None]
    for j in js:
        for p in ("gate", "down"):
            w = f"{layer.shared_module(p, j)}.weight"
            out.extend(_width_issue(ctx, w, p, want, "the shared expert", layer))
    return out


def _hidden(
    ctx: ValidationContext,
    name: str,
    is_down: bool,
    hidden: int,
    layer: int,
    axis: int | None = None,
) -> list[Issue]:
    """gate/up are logically ``[..., I, H]`` and down ``[..., H, I]`` (``axis``: where H is,
    for ``in_out`` 3-D experts): H must be hidden_size."""
    logical = _logical(ctx, name)
    if len(logical) < 2:
        return []
    at = (-2 if is_down else -1) if axis is None else axis
    h = logical[at]
    if h == hidden:
        return []
    which = "rows" if at == -2 else "columns"
    return [
        _issue(
            ctx,
            name,
            f"logical shape {_fmt(logical)} has {h} {which} but hidden_size is {hidden} (MoE "
            f"layer {layer}); the expert does not fit the model",
        )
    ]
