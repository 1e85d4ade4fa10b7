"""Numeric check: the converted layer through the runtime equals the source layer's reference.

Per sampled MoE layer (``verify.sampling``):

1. seeded random hidden states ``x [tokens, H]`` (float32; bf16 for the Triton kernels on a
   GPU, as vLLM runs them; the torch backend stays float32 everywhere);
2. routing with each checkpoint's own router (gate weight, ``e_score_correction_bias``,
   config.json routing fields), on the CPU in float32 for both: tokens whose experts differ
   between source and converted router are counted;
3. only the experts the tokens chose are read, from both checkpoints (``layers.loader``);
4. reference: ``runtime.reference.moe_reference`` on the SOURCE (codec-decoded weights,
   float64 accumulation, shared experts as separate MLPs);
5. runtime: ``runtime.moe.run_moe`` on the CONVERTED layer (fused shared slots, padded
   intermediate, TP ``tp`` rank slices summed as the all-reduce would), ``backend`` triton
   (the Triton interpreter on CPU) or torch;
6. max abs error, max relative error, relative L2 error against the format's tolerance
   (``verify.tolerance``).

The converted experts must also split evenly over the TP ranks (``I % (tp x alignment) == 0``)
as vLLM slices them; a layer that needs padding at run time fails.

Example::

    report = check_numeric(src_view, dst_view, NumericOptions(tokens=16, backend="torch"), tp=2)
    [(r.layer, r.status, f"{r.rel_error:.1e}") for r in report.layers]
    # [(1, 'passed', '2.1e-07'), (3, 'passed', '1.9e-07')]
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

import torch

from checkpoint_tool.errors import CkptError, UsageError
from checkpoint_tool.layers.inputs import hidden_states, input_ids, remap_experts, route_tokens
from checkpoint_tool.layers.loader import CheckpointView, LoadedLayer
from checkpoint_tool.runtime.moe import prepare_moe, run_prepared
from checkpoint_tool.runtime.reference import moe_reference
from checkpoint_tool.runtime.routing import RoutingConfig
from checkpoint_tool.runtime.shard import rank_intermediate
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights
from checkpoint_tool.verify.engram import check_engram
from checkpoint_tool.verify.report import EngramResult, LayerResult, NumericReport
from checkpoint_tool.verify.sampling import ConvertedView, LayerPolicy, sample_layers
from checkpoint_tool.verify.tolerance import tolerance_for

Device = Literal["auto", "cpu", "cuda"]
Backend = Literal["triton", "torch"]
DEFAULT_TOKENS = 16
#: the sampling policy's fields a ``LayerResult`` repeats
_POLICY_FIELDS = ("layer", "fused", "padded", "is_mtp", "routed_scheme", "shared_scheme")


@dataclass(frozen=True)
class NumericOptions:
    layers: Sequence[int] | None = None
    tokens: int = DEFAULT_TOKENS
    seed: int = 0
    device: Device = "auto"
    backend: Backend = "triton"
    #: a layer that cannot run is reported, not failed (``--allow-skipped``)
    allow_skipped: bool = False

    @classmethod
    def of(cls, options: object) -> NumericOptions:
        """The numeric fields of a wider options object (``VerifyOptions`` has them all):
        ``NumericOptions.of(VerifyOptions(tokens=32)).tokens`` -> ``32``."""
        return cls(**{f.name: getattr(options, f.name) for f in fields(cls)})


def resolve_device(device: Device) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cuda`` without one -> error."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is visible; use --device cpu or auto")
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--device {device!r}: choose auto, cpu or cuda")
    return device


def prepare_backend(backend: Backend, device: str) -> None:
    """Make the triton backend run where the tensors are (interpreter for CPU tensors)."""
    if backend == "torch":
        return
    if backend != "triton":
        raise UsageError(f"--backend {backend!r}: choose triton or torch")
    if device == "cpu" and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from checkpoint_tool.runtime.kernels import INTERPRETED

    if INTERPRETED != (device == "cpu"):
        mode = "interpreted (CPU)" if INTERPRETED else "compiled (GPU)"
        raise UsageError(
            f"--backend triton: triton already runs {mode} in this process, not on {device}; "
            f"use --backend torch or --device {'cpu' if INTERPRETED else 'cuda'}"
        )


def check_numeric(
    src: CheckpointView, dst: ConvertedView, options: NumericOptions, *, tp: int = 1
) -> NumericReport:
    """Run every sampled layer (see the module docstring)."""
    t0 = time.monotonic()
    if options.tokens < 1:
        raise UsageError(f"--tokens {options.tokens}: give 1 or more")
    if tp < 1:
        raise UsageError(f"--tp {tp}: give 1 or more")
    device = resolve_device(options.device)
    prepare_backend(options.backend, device)
    policies = sample_layers(src, dst, options.layers)
    results = [_check_layer(src, dst, p, options, device, tp) for p in policies]
    engram = (
        check_engram(src, dst, rows=options.tokens, seed=options.seed)
        if isinstance(dst, CheckpointView)
        else []
    )
    status, reason = numeric_status([*results, *engram], options.allow_skipped)
    return NumericReport(
        status=status,
        reason=reason,
        ran_layers=[r.layer for r in results if r.status != "skipped"],
        skipped_layers=[r.layer for r in results if r.status == "skipped"],
        allow_skipped=options.allow_skipped,
        backend=options.backend,
        device=device,
        tp=tp,
        tokens=options.tokens,
        seed=options.seed,
        layers=results,
        engram=engram,
        seconds=round(time.monotonic() - t0, 3),
    )


def numeric_status(
    results: Sequence[LayerResult | EngramResult], allow_skipped: bool
) -> tuple[str, str | None]:
    """The section's status and reason: a layer that could not run fails it unless allowed."""
    skipped = [r.layer for r in results if r.status == "skipped"]
    if any(r.status == "failed" for r in results):
        return "failed", None
    if skipped and not allow_skipped:
        layers = ",".join(map(str, skipped))
        return "failed", (
            f"layer(s) {layers} could not run (see their messages); a check that could not run "
            "is not a pass: pass --allow-skipped to accept it, or --no-numeric"
        )
    if len(skipped) == len(results):
        return "skipped", "no sampled layer could run (see layers; allowed by --allow-skipped)"
    note = f"layer(s) {','.join(map(str, skipped))} skipped (--allow-skipped)" if skipped else None
    return "passed", note


def bf16_activations(backend: Backend, device: str) -> bool:
    """The Triton kernels take bf16 activations on a GPU (as vLLM); everything else float32."""
    return backend == "triton" and device != "cpu"


def _check_layer(
    src: CheckpointView,
    dst: ConvertedView,
    policy: LayerPolicy,
    options: NumericOptions,
    device: str,
    tp: int,
) -> LayerResult:
    t0 = time.monotonic()
    result = LayerResult(
        status="skipped",
        policy=policy.label,
        tokens=options.tokens,
        **{k: getattr(policy, k) for k in _POLICY_FIELDS},
    )
    layer = policy.layer
    x = hidden_states(options.tokens, src.facts.hidden_size, options.seed, layer)
    bf16 = bf16_activations(options.backend, device)
    x = x.to(torch.bfloat16 if bf16 else torch.float32).float()  # the reference sees these
    try:  # the source side: a problem here means the layer cannot be checked
        src_routing, src_router = src.routing(), src.router(layer)
        tokens = input_ids(options.tokens, src_router, options.seed, layer)
        ids_s, w_s = route_tokens(x, src_router, src_routing, tokens)
    except CkptError as exc:
        result.message = f"source: {exc.message}"
        return _done(result, t0)
    try:
        dst_routing, dst_router = dst.routing(), dst.router(layer)
        if (dst_router.hash_table is None) != (src_router.hash_table is None):
            side = "converted" if src_router.hash_table is not None else "source"
            return _failed(result, f"converted: the {side} layer has no hash table (tid2eid)", t0)
        ids_d, w_d = route_tokens(x, dst_router, dst_routing, tokens)
    except CkptError as exc:
        return _failed(result, f"converted: {exc.message}", t0)
    result.routing_mismatches = int(
        (ids_s.sort(dim=1).values != ids_d.sort(dim=1).values).any(dim=1).sum()
    )
    used = sorted(set(ids_s.flatten().tolist()) | set(ids_d.flatten().tolist()))
    result.experts_used = len(used)
    try:
        src_layer = src.layer(layer, experts=used, router=src_router)
        from checkpoint_tool.verify.requant import requantized_reference

        src_layer = requantized_reference(src_layer, layer, dst.ckpt_metadata())
        ref = _reference(x, src_layer, src_routing, ids_s, w_s)
    except CkptError as exc:
        result.message = f"source: {exc.message}"
        return _done(result, t0)
    try:
        ranks, slot_of = dst.rank_layers(layer, experts=used, router=dst_router)
        problems = [] if dst.presliced else _tp_problems(ranks[0], tp)
        topk = (remap_experts(ids_d, slot_of), w_d)
        got = _runtime(x, ranks, dst.presliced, dst_routing, topk, options.backend, device, tp)
    except CkptError as exc:
        return _failed(result, f"converted: {exc.message}", t0)
    tol = tolerance_for(_schemes(ranks[0]), bf16_activations=bf16)
    diff = (got.double() - ref.double()).abs()
    ref_norm = float(ref.double().norm())
    ref_max = float(ref.double().abs().max())
    result.max_abs_error = float(diff.max()) if torch.isfinite(diff).all() else float("inf")
    result.rel_error = float(diff.norm()) / ref_norm if ref_norm else float(diff.norm())
    result.max_rel_error = result.max_abs_error / ref_max if ref_max else result.max_abs_error
    result.rel_tolerance, result.max_rel_tolerance = tol.rel, tol.max_rel
    result.tolerance_basis = tol.basis
    result.reference_norm = ref_norm
    within = result.rel_error <= tol.rel and result.max_rel_error <= tol.max_rel
    notes = list(problems)
    if result.routing_mismatches:
        notes.append(
            f"{result.routing_mismatches} token(s) route to other experts with the converted router"
        )
    if not within:
        notes.insert(0, f"error above tolerance ({tol.basis})")
    result.message = "; ".join(notes) or None
    result.status = "passed" if within and not problems else "failed"
    return _done(result, t0)


def _reference(
    x: torch.Tensor,
    loaded: LoadedLayer,
    routing: RoutingConfig,
    ids: torch.Tensor,
    weights: torch.Tensor,
) -> torch.Tensor:
    topk = (remap_experts(ids, loaded.slot_of), weights)
    return moe_reference(x, loaded.weights, routing, topk=topk)


def _runtime(
    x: torch.Tensor,
    ranks: list[MoeLayerWeights],
    presliced: bool,
    routing,  # RoutingConfig
    topk: tuple[torch.Tensor, torch.Tensor],
    backend: Backend,
    device: str,
    tp: int,
) -> torch.Tensor:
    """Whole layer: ``run_moe`` slices ``tp`` ranks; presliced: each rank's layer as stored."""
    if device != "cpu":
        ranks = [r.to(device) for r in ranks]
    dtype = torch.bfloat16 if bf16_activations(backend, device) else torch.float32
    act = x.to(device, dtype)
    topk = (topk[0].to(device), topk[1].to(device))
    if presliced:
        prepared = prepare_moe(ranks, backend=backend)
    else:
        prepared = prepare_moe(ranks[0], tp=tp, backend=backend)
    out = run_prepared(act, prepared, routing, backend=backend, topk=topk)
    return out.float().cpu()


def _tp_problems(layer: MoeLayerWeights, tp: int) -> list[str]:
    """Experts whose intermediate dim vLLM could not split into aligned ``tp`` shares."""
    out = []
    seen: set[tuple[str, int]] = set()
    experts: list[tuple[str, ExpertWeights]] = [
        *(("routed/fused", ex) for ex in layer.experts),
        *(("shared", ex) for ex in layer.shared),
    ]
    for kind, ex in experts:
        per_rank = rank_intermediate(ex, tp)
        if per_rank * tp != ex.intermediate and (kind, ex.intermediate) not in seen:
            seen.add((kind, ex.intermediate))
            out.append(
                f"{kind} expert {ex.gate.label}: intermediate {ex.intermediate} does not split "
                f"into {tp} aligned share(s) (needs {per_rank * tp}); vLLM would cut scale "
                "groups apart"
            )
    return out


def _schemes(layer: MoeLayerWeights) -> list:
    return [p.scheme for ex in (*layer.experts, *layer.shared) for p in ex.projections()]


def _failed(result: LayerResult, message: str, t0: float) -> LayerResult:
    result.status = "failed"
    result.message = message
    return _done(result, t0)


def _done(result: LayerResult, t0: float) -> LayerResult:
    result.seconds = round(time.monotonic() - t0, 3)
    return result
