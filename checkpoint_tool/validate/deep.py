"""``--deep``: run the MoE runtime on a few sampled layers and check the outputs are sane.

For each sampled MoE layer (``deep_layers`` of them, spread evenly: first, last, between):

1. seeded standard-normal hidden states ``x [tokens, H]`` (float32, CPU);
2. routing with the checkpoint's own router and config.json routing fields;
3. only the chosen experts (plus fused shared slots and shared MLPs) are read, through the same
   loader ``ckpt verify`` uses (``layers.loader.CheckpointView``, vLLM name semantics);
4. the runtime (``runtime.moe.run_moe``, torch backend) and the float64 reference decode
   (``runtime.reference.moe_reference``) both run the layer.

Findings (rule ``deep_runtime``): non-finite outputs (error), an all-zero output (error: the
weights or scales decode to zero), runtime and reference disagreeing beyond the numeric
tolerance ``ckpt verify`` uses (error), an output RMS more than 1e4 times (or less than 1e-6
times) the input RMS (warning: a scale off by a large power of two). A layer that cannot be
loaded (missing tensor, unreadable shard) is an error naming the reason.

This checks the checkpoint is *runnable* and decodes to finite, non-degenerate numbers; it does
not prove the values are right (``ckpt verify`` compares against a source for that). Skipped
with the reason when the runtime or the verify loader cannot be imported.

Example finding::

    Issue(severity="error", rule="deep_runtime", tensor="model.layers.1.mlp",
          message="MoE layer 1: 16 of 4096 runtime outputs are NaN/inf (3 experts read)")
"""

from __future__ import annotations

import math
from typing import Any

from checkpoint_tool.errors import CkptError
from checkpoint_tool.report import Issue
from checkpoint_tool.validate.context import Unavailable, ValidationContext

#: output RMS / input RMS outside this range is suspicious (warning)
RMS_RATIO_RANGE = (1e-6, 1e4)


def sample_layers(indices: list[int], count: int) -> list[int]:
    """``count`` layer indices spread evenly over ``indices`` (first and last included).

    ``sample_layers([1, 2, 3, 4, 5], 3) -> [1, 3, 5]``
    """
    if count <= 0 or not indices:
        return []
    if count >= len(indices):
        return list(indices)
    if count == 1:
        return [indices[0]]
    picks = {round(i * (len(indices) - 1) / (count - 1)) for i in range(count)}
    return [indices[i] for i in sorted(picks)]


def check_deep_runtime(ctx: ValidationContext) -> list[Issue]:
    """With --deep: sampled MoE layers run through the runtime give finite, sane outputs."""
    if not ctx.options.deep:
        raise Unavailable("not requested; pass --deep")
    try:
        from checkpoint_tool.layers.loader import CheckpointView
        from checkpoint_tool.runtime.moe import run_moe  # noqa: F401
        from checkpoint_tool.runtime.reference import moe_reference  # noqa: F401
    except ImportError as exc:
        raise Unavailable(f"the MoE runtime is not available ({exc})") from None
    facts = ctx.facts()
    ctx.resolved()  # a config that does not resolve is quant_config's finding, not ours
    if not facts.moe_layers:
        raise Unavailable("config.json describes no MoE layer")
    try:
        view = CheckpointView(ctx.catalog, semantics="vllm")
    except CkptError as exc:
        return [_issue(None, f"the checkpoint cannot be loaded for a run: {exc.message}")]
    try:
        routing = view.routing()
    except CkptError as exc:  # a model the runtime does not implement, not a broken checkpoint
        raise Unavailable(f"the runtime cannot route this model ({exc.message})") from None
    layers = [m for m in facts.moe_layers if not _touches_unreadable(ctx, m)]
    skipped = len(facts.moe_layers) - len(layers)
    picked = sample_layers([m.layer for m in layers], ctx.options.deep_layers)
    if not picked:
        raise Unavailable(
            f"every MoE layer has unreadable tensors ({skipped}); see the structure rules"
        )
    out: list[Issue] = []
    for index in picked:
        layer = facts.layer(index)
        assert layer is not None  # picked from facts.moe_layers
        prefix = layer.prefix
        try:
            out.extend(_run_layer(ctx, view, routing, index, prefix))
        except CkptError as exc:
            out.append(_issue(prefix, f"MoE layer {index} cannot run: {exc.message}"))
    return out


def _touches_unreadable(ctx: ValidationContext, layer: Any) -> bool:
    prefix = layer.prefix + "."
    return any(n.startswith(prefix) for n in ctx.unreadable) or any(
        n.startswith(prefix) and n not in ctx.catalog.tensors for n in ctx.all_names
    )


def _run_layer(
    ctx: ValidationContext, view: Any, routing: Any, index: int, prefix: str
) -> list[Issue]:
    import torch

    from checkpoint_tool.runtime.moe import run_moe
    from checkpoint_tool.runtime.reference import moe_reference
    from checkpoint_tool.runtime.routing import route
    from checkpoint_tool.verify.tolerance import tolerance_for

    hidden = int(ctx.facts().hidden_size)
    gen = torch.Generator().manual_seed(1_000_003 + index)
    x = torch.randn(ctx.options.deep_tokens, hidden, generator=gen)
    router = view.router(index)
    tokens = None  # a DeepSeek-V4 hash-routed layer picks experts by token id (tid2eid)
    if router.hash_table is not None:
        tokens = torch.randint(0, router.hash_table.shape[0], (x.shape[0],), generator=gen)
    ids, weights = route(
        x, router.weight, routing, router.bias, input_ids=tokens, hash_table=router.hash_table
    )
    used = sorted(set(ids.flatten().tolist()))
    loaded = view.layer(index, experts=used, router=router)
    lut = torch.full((max(loaded.slot_of) + 1,), -1, dtype=torch.long)
    for e, i in loaded.slot_of.items():
        lut[e] = i
    topk = (lut[ids], weights)
    ref = moe_reference(x, loaded.weights, routing, topk=topk).double()
    got = run_moe(x, loaded.weights, routing, backend="torch", topk=topk).double()
    what = f"MoE layer {index}"
    read = f"{len(used)} routed experts read"
    out: list[Issue] = []
    bad = {
        label: int((~torch.isfinite(y)).sum())
        for label, y in (("runtime", got), ("reference", ref))
    }
    if any(bad.values()):
        which = " and ".join(k for k, v in bad.items() if v)
        return [
            _issue(
                prefix,
                f"{what}: {max(bad.values())} of {ref.numel()} outputs are NaN/inf ({which}; "
                f"{read}); a weight or scale decodes to NaN/inf",
            )
        ]
    x_rms = float(x.double().pow(2).mean().sqrt())
    y_rms = float(ref.pow(2).mean().sqrt())
    if y_rms == 0.0:
        return [
            _issue(
                prefix, f"{what}: the output is all zeros ({read}); weights or scales decode to 0"
            )
        ]
    schemes = [
        p.scheme
        for ex in (*loaded.weights.experts, *loaded.weights.shared)
        for p in ex.projections()
    ]
    tol = tolerance_for(schemes, bf16_activations=False)  # torch backend, float32 on CPU
    rel = float((got - ref).norm() / ref.norm())
    if not rel <= tol.rel:
        out.append(
            _issue(
                prefix,
                f"{what}: runtime and reference decode differ by {rel:.1e} relative (tolerance "
                f"{tol.rel:.0e}, {tol.basis}); the layer does not run as stored",
            )
        )
    ratio = y_rms / x_rms if x_rms else math.inf
    low, high = RMS_RATIO_RANGE
    if not low <= ratio <= high:
        out.append(
            Issue(
                severity="warning",
                rule="deep_runtime",
                tensor=prefix,
                message=f"{what}: output RMS is {ratio:.1e} x the input RMS (expected within "
                f"[{low:.0e}, {high:.0e}]); a scale may be off by a large power of two",
            )
        )
    return out


def _issue(prefix: str | None, message: str) -> Issue:
    return Issue(severity="error", rule="deep_runtime", tensor=prefix, message=message)
