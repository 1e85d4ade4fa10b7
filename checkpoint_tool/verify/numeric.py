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
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Literal, Protocol

import torch

from checkpoint_tool.errors import CkptError, UsageError
from checkpoint_tool.layers.inputs import hidden_states, input_ids, remap_experts, route_tokens
from checkpoint_tool.layers.loader import CheckpointView, LoadedLayer
from checkpoint_tool.runtime.moe import prepare_moe, run_prepared
from checkpoint_tool.runtime.reference import dequantize_projection, moe_reference
from checkpoint_tool.runtime.routing import RoutingConfig
from checkpoint_tool.runtime.shard import rank_intermediate
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights, Projection
from checkpoint_tool.verify.engram import check_engram
from checkpoint_tool.verify.report import EngramResult, LayerResult, NumericReport
from checkpoint_tool.verify.sampling import (
    ConvertedView,
    LayerPolicy,
    all_layers,
    sample_layers,
)
from checkpoint_tool.verify.tolerance import tolerance_for

Device = Literal["auto", "cpu", "cuda"]
Backend = Literal["triton", "torch"]
DEFAULT_TOKENS = 16
#: the sampling policy's fields a ``LayerResult`` repeats
_POLICY_FIELDS = ("layer", "fused", "padded", "is_mtp", "routed_scheme", "shared_scheme")


#: ``--layers``: ``sample`` (one per policy), ``all``, or layer numbers (None: ``sample``)
LayerSelection = Sequence[int] | Literal["all", "sample"] | None


class LayerProgress(Protocol):
    """Sees a numeric run layer by layer (``verify.progress``)."""

    def start(self, total: int) -> None: ...
    def layer_done(self, result: LayerResult) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class NumericOptions:
    layers: LayerSelection = None
    tokens: int = DEFAULT_TOKENS
    seed: int = 0
    device: Device = "auto"
    backend: Backend = "triton"
    #: a layer that cannot run is reported, not failed (``--allow-skipped``)
    allow_skipped: bool = False
    #: time budget of ``--layers all``: layers past the policy sample start while it allows
    max_seconds: float | None = None

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
    src: CheckpointView,
    dst: ConvertedView,
    options: NumericOptions,
    *,
    tp: int = 1,
    progress: LayerProgress | None = None,
) -> NumericReport:
    """Run the selected layers (see the module docstring); ``progress`` sees each one."""
    t0 = time.monotonic()
    if options.tokens < 1:
        raise UsageError(f"--tokens {options.tokens}: give 1 or more")
    if tp < 1:
        raise UsageError(f"--tp {tp}: give 1 or more")
    if options.max_seconds is not None and options.max_seconds <= 0:
        raise UsageError(f"--max-seconds {options.max_seconds}: give a positive number")
    device = resolve_device(options.device)
    prepare_backend(options.backend, device)
    required, extra = select_layers(src, dst, options.layers)
    results, not_run = _run_layers(src, dst, required, extra, options, device, tp, progress, t0)
    engram = (
        check_engram(src, dst, rows=options.tokens, seed=options.seed)
        if isinstance(dst, CheckpointView)
        else []
    )
    status, reason = numeric_status([*results, *engram], options.allow_skipped)
    if not_run and reason is None:
        reason = (
            f"--max-seconds {options.max_seconds:g}: {len(not_run)} of "
            f"{len(required) + len(extra)} selected layer(s) not run (every sampled policy ran)"
        )
    return NumericReport(
        status=status,
        reason=reason,
        ran_layers=[r.layer for r in results if r.status != "skipped"],
        skipped_layers=[r.layer for r in results if r.status == "skipped"],
        not_run_layers=not_run,
        selection=_selection_label(options.layers),
        max_seconds=options.max_seconds,
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


def select_layers(
    src: CheckpointView, dst: ConvertedView, layers: LayerSelection
) -> tuple[list[LayerPolicy], list[LayerPolicy]]:
    """(layers that must run, layers run while ``--max-seconds`` allows).

    ``sample`` / None: one per policy, all required; a list: those, all required; ``all``: the
    policy sample required first, then every other MoE layer in a spread order (halving the
    gaps), so a run stopped by the budget still covers the model evenly.
    """
    if layers is None or layers == "sample":
        return sample_layers(src, dst), []
    if layers == "all":
        sample = sample_layers(src, dst)
        everything = all_layers(src, dst)
        done = {p.layer for p in sample}
        rest = [p for p in everything if p.layer not in done]
        return sample, [rest[i] for i in spread_order(len(rest))]
    if isinstance(layers, str):
        raise UsageError(f"--layers {layers!r}: give all, sample or layer numbers like 3,4 or 3-5")
    return sample_layers(src, dst, list(layers)), []


def spread_order(n: int) -> list[int]:
    """0..n-1 ordered so every prefix is spread out (ends, then midpoints breadth first):
    ``spread_order(5)`` -> ``[0, 4, 2, 1, 3]``."""
    if n <= 2:
        return list(range(n))
    order, gaps = [0, n - 1], deque([(0, n - 1)])
    while gaps:
        lo, hi = gaps.popleft()
        if hi - lo >= 2:
            mid = (lo + hi) // 2
            order.append(mid)
            gaps.extend(((lo, mid), (mid, hi)))
    return order


def _selection_label(layers: LayerSelection) -> str:
    if layers is None or isinstance(layers, str):
        return layers or "sample"
    return ",".join(map(str, layers))


def _run_layers(
    src: CheckpointView,
    dst: ConvertedView,
    required: list[LayerPolicy],
    extra: list[LayerPolicy],
    options: NumericOptions,
    device: str,
    tp: int,
    progress: LayerProgress | None,
    t0: float,
) -> tuple[list[LayerResult], list[int]]:
    """Each layer's reads run one layer ahead (a thread) of its compute; extra layers start
    while the time budget, judged by the slowest layer so far, allows one more."""
    bf16 = bf16_activations(options.backend, device)
    todo = [*required, *extra]
    results: list[LayerResult] = []
    if progress is not None:
        progress.start(len(todo))
    with ThreadPoolExecutor(1, thread_name_prefix="ckpt-read-ahead") as reader:
        load = partial(_load, src, dst, options=options, bf16=bf16, tp=tp)
        ahead: Future[_Loaded] | None = reader.submit(load, todo[0]) if todo else None
        for i, _policy in enumerate(todo):
            assert ahead is not None
            loaded = ahead.result()
            nxt = i + 1
            ahead = None
            if nxt < len(todo) and _allowed(nxt, len(required), results, options, t0):
                ahead = reader.submit(load, todo[nxt])
            results.append(_compute(loaded, options, device, tp, dst))
            if progress is not None:
                progress.layer_done(results[-1])
            if ahead is None:
                break
    if progress is not None:
        progress.close()
    not_run = sorted(p.layer for p in todo[len(results) :])
    results.sort(key=lambda r: r.layer)
    return results, not_run


def _allowed(
    index: int, n_required: int, done: list[LayerResult], options: NumericOptions, t0: float
) -> bool:
    """Whether layer ``index`` of the selection starts: required ones always do."""
    if index < n_required or options.max_seconds is None:
        return True
    slowest = max((r.seconds for r in done), default=0.0)
    return time.monotonic() - t0 + 2 * slowest <= options.max_seconds


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


@dataclass
class _Loaded:
    """One layer's inputs, routings and weights from both checkpoints (``_load``: reads only,
    on the CPU; run in the read-ahead thread while the previous layer computes)."""

    result: LayerResult
    t0: float
    x: torch.Tensor | None = None
    src_layer: LoadedLayer | None = None
    src_routing: RoutingConfig | None = None
    src_topk: tuple[torch.Tensor, torch.Tensor] | None = None
    ranks: list[MoeLayerWeights] = field(default_factory=list)
    dst_routing: RoutingConfig | None = None
    dst_topk: tuple[torch.Tensor, torch.Tensor] | None = None
    problems: list[str] = field(default_factory=list)
    #: the result is final (the layer could not be read or routed)
    done: bool = False


def _load(
    src: CheckpointView, dst: ConvertedView, policy: LayerPolicy, options: NumericOptions,
    bf16: bool, tp: int,
) -> _Loaded:  # fmt: skip
    t0 = time.monotonic()
    result = LayerResult(
        status="skipped",
        policy=policy.label,
        tokens=options.tokens,
        **{k: getattr(policy, k) for k in _POLICY_FIELDS},
    )
    out = _Loaded(result, t0)
    layer = policy.layer
    x = hidden_states(options.tokens, src.facts.hidden_size, options.seed, layer)
    x = x.to(torch.bfloat16 if bf16 else torch.float32).float()  # the reference sees these
    try:  # the source side: a problem here means the layer cannot be checked
        src_routing, src_router = src.routing(), src.router(layer)
        tokens = input_ids(options.tokens, src_router, options.seed, layer)
        ids_s, w_s = route_tokens(x, src_router, src_routing, tokens)
    except CkptError as exc:
        result.message = f"source: {exc.message}"
        return _final(out)
    try:
        dst_routing, dst_router = dst.routing(), dst.router(layer)
        if (dst_router.hash_table is None) != (src_router.hash_table is None):
            side = "converted" if src_router.hash_table is not None else "source"
            return _final(out, f"converted: the {side} layer has no hash table (tid2eid)")
        ids_d, w_d = route_tokens(x, dst_router, dst_routing, tokens)
    except CkptError as exc:
        return _final(out, f"converted: {exc.message}")
    result.routing_mismatches = int(
        (ids_s.sort(dim=1).values != ids_d.sort(dim=1).values).any(dim=1).sum()
    )
    used = sorted(set(ids_s.flatten().tolist()) | set(ids_d.flatten().tolist()))
    result.experts_used = len(used)
    try:
        src_layer = src.layer(layer, experts=used, router=src_router)
        from checkpoint_tool.verify.requant import requantized_reference

        src_layer = requantized_reference(src_layer, layer, dst.ckpt_metadata())
        out.src_topk = (remap_experts(ids_s, src_layer.slot_of), w_s)
    except CkptError as exc:
        result.message = f"source: {exc.message}"
        return _final(out)
    try:
        ranks, slot_of = dst.rank_layers(layer, experts=used, router=dst_router)
        out.problems = [] if dst.presliced else _tp_problems(ranks[0], tp)
        out.dst_topk = (remap_experts(ids_d, slot_of), w_d)
    except CkptError as exc:
        return _final(out, f"converted: {exc.message}")
    out.x, out.src_layer, out.src_routing = x, src_layer, src_routing
    out.ranks, out.dst_routing = ranks, dst_routing
    result.read_seconds = round(time.monotonic() - t0, 3)
    return out


def _final(out: _Loaded, failure: str | None = None) -> _Loaded:
    """A layer decided while loading: skipped (source problem) or ``failure`` (converted)."""
    if failure is not None:
        out.result.status, out.result.message = "failed", failure
    out.result.read_seconds = round(time.monotonic() - out.t0, 3)
    out.done = True
    return out


def _compute(
    loaded: _Loaded, options: NumericOptions, device: str, tp: int, dst: ConvertedView
) -> LayerResult:
    """Reference (on ``device``, float64) and runtime of a loaded layer, compared."""
    result = loaded.result
    if loaded.done:
        result.seconds = result.read_seconds
        return result
    t0 = time.monotonic()
    assert loaded.x is not None and loaded.src_layer is not None and loaded.src_topk is not None
    assert loaded.src_routing is not None and loaded.dst_topk is not None
    bf16 = bf16_activations(options.backend, device)
    try:
        ref, decode_s, ref_s = _reference(
            loaded.x, loaded.src_layer, loaded.src_routing, loaded.src_topk, device
        )
    except CkptError as exc:
        result.message = f"source: {exc.message}"
        return _timed(result, t0)
    result.decode_seconds, result.reference_seconds = round(decode_s, 3), round(ref_s, 3)
    t1 = time.monotonic()
    try:
        got = _runtime(loaded.x, loaded.ranks, dst.presliced, loaded.dst_routing,
                       loaded.dst_topk, options.backend, device, tp)  # fmt: skip
    except CkptError as exc:
        result.status, result.message = "failed", f"converted: {exc.message}"
        return _timed(result, t0)
    result.runtime_seconds = round(time.monotonic() - t1, 3)
    tol = tolerance_for(_schemes(loaded.ranks[0]), bf16_activations=bf16)
    ref64, got64 = ref.double(), got.double()
    diff = (got64 - ref64).abs()
    ref_norm = float(ref64.norm())
    ref_max = float(ref64.abs().max())
    result.max_abs_error = float(diff.max()) if torch.isfinite(diff).all() else float("inf")
    result.rel_error = float(diff.norm()) / ref_norm if ref_norm else float(diff.norm())
    result.max_rel_error = result.max_abs_error / ref_max if ref_max else result.max_abs_error
    result.rel_tolerance, result.max_rel_tolerance = tol.rel, tol.max_rel
    result.tolerance_basis = tol.basis
    result.reference_norm = ref_norm
    within = result.rel_error <= tol.rel and result.max_rel_error <= tol.max_rel
    notes = list(loaded.problems)
    if result.routing_mismatches:
        notes.append(
            f"{result.routing_mismatches} token(s) route to other experts with the converted router"
        )
    if not within:
        notes.insert(0, f"error above tolerance ({tol.basis})")
    result.message = "; ".join(notes) or None
    result.status = "passed" if within and not loaded.problems else "failed"
    return _timed(result, t0)


def _timed(result: LayerResult, t0: float) -> LayerResult:
    """Seconds of the layer: its reads (in the read-ahead thread) plus its compute."""
    result.seconds = round(result.read_seconds + time.monotonic() - t0, 3)
    return result


def _sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def _reference(
    x: torch.Tensor,
    loaded: LoadedLayer,
    routing: RoutingConfig,
    topk: tuple[torch.Tensor, torch.Tensor],
    device: str,
) -> tuple[torch.Tensor, float, float]:
    """(float32 reference on the CPU, seconds decoding, seconds of the float64 GEMMs).

    On a GPU the source weights are moved there still encoded and decoded there by the codecs
    (``runtime.reference.dequantize_projection``); the float64 products run there too.
    """
    decode = [0.0]

    def timed_decode(p: Projection) -> torch.Tensor:
        _sync(device)
        t = time.monotonic()
        w = dequantize_projection(p).double()
        _sync(device)
        decode[0] += time.monotonic() - t
        return w

    _sync(device)
    t0 = time.monotonic()
    weights = loaded.weights if device == "cpu" else loaded.weights.to(device)
    topk = (topk[0].to(device), topk[1].to(device))
    _sync(device)
    decode[0] += time.monotonic() - t0
    t1 = time.monotonic()
    ref = moe_reference(x.to(device), weights, routing, topk=topk, dequantize=timed_decode)
    ref = ref.cpu()
    total = time.monotonic() - t1
    return ref, decode[0], max(0.0, total - (decode[0] - (t1 - t0)))


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
