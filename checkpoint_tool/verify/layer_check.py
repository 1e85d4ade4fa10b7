"""One numeric layer: read both checkpoints' layer, run the reference and the runtime, compare.

``load_layer`` does the reads and the routing on the CPU (the read-ahead thread of
``verify.numeric`` runs it one layer ahead) and, given a ``reference_device``, the source
side's reference as soon as the source experts are in, while the converted experts are still
being read: it decodes the source experts and runs the float64 reference on the check's
device (on a GPU the encoded weights are moved there and decoded by the codecs there).
``compute_layer`` runs the converted layer through the runtime (and the reference, where
``load_layer`` did not) and compares against the format's tolerance. Each stage's seconds
land in the ``LayerResult``; an overlapped reference's seconds are also inside ``read``.

Example::

    loaded = load_layer(src, dst, policy, options=NumericOptions(tokens=16), bf16=False, tp=2)
    result = compute_layer(loaded, options, "cpu", 2, dst)
    result.status, result.read_seconds, result.decode_seconds, result.runtime_seconds
    # ('passed', 0.21, 2.7, 1.2)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import torch

from checkpoint_tool.errors import CkptError
from checkpoint_tool.layers.inputs import hidden_states, input_ids, remap_experts, route_tokens
from checkpoint_tool.layers.loader import CheckpointView, LoadedLayer
from checkpoint_tool.runtime.moe import prepare_moe, run_prepared
from checkpoint_tool.runtime.reference import dequantize_projection, moe_reference
from checkpoint_tool.runtime.routing import RoutingConfig
from checkpoint_tool.runtime.shard import rank_intermediate
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights, Projection
from checkpoint_tool.verify.report import LayerResult
from checkpoint_tool.verify.sampling import ConvertedView, LayerPolicy
from checkpoint_tool.verify.tolerance import tolerance_for

if TYPE_CHECKING:
    from checkpoint_tool.verify.numeric import NumericOptions

Backend = Literal["triton", "torch"]
#: the sampling policy's fields a ``LayerResult`` repeats
_POLICY_FIELDS = ("layer", "fused", "padded", "is_mtp", "routed_scheme", "shared_scheme")


def bf16_activations(backend: Backend, device: str) -> bool:
    """The Triton kernels take bf16 activations on a GPU (as vLLM); everything else float32."""
    return backend == "triton" and device != "cpu"


@dataclass
class Loaded:
    """One layer's inputs, routings and weights from both checkpoints (``load_layer``: reads only,
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
    #: the source side's reference (output, decode s, reference s), computed while the
    #: converted side was still being read (``load_layer(..., reference_device=...)``)
    reference: tuple[torch.Tensor, float, float] | None = None
    #: the source side's reference could not be computed (a message for the result)
    reference_error: str | None = None
    #: the result is final (the layer could not be read or routed)
    done: bool = False


def load_layer(
    src: CheckpointView, dst: ConvertedView, policy: LayerPolicy, options: NumericOptions,
    bf16: bool, tp: int, device: str | None = None, reference_device: str | None = None,
) -> Loaded:  # fmt: skip
    """Inputs, both routings (CPU) and both sides' chosen experts, read onto ``device`` (None:
    the CPU; a GPU: through pinned staging, ``layers.fastread``). With ``reference_device``
    the source's float64 reference runs there as soon as the source experts are in, while
    the converted side is still being read."""
    t0 = time.monotonic()
    result = LayerResult(
        status="skipped",
        policy=policy.label,
        tokens=options.tokens,
        **{k: getattr(policy, k) for k in _POLICY_FIELDS},
    )
    out = Loaded(result, t0)
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

    def read_source() -> LoadedLayer:
        from checkpoint_tool.verify.requant import requantized_reference

        loaded = src.layer(layer, experts=used, router=src_router, device=device)
        loaded = requantized_reference(loaded, layer, dst.ckpt_metadata())
        if reference_device is not None:
            topk = (remap_experts(ids_s, loaded.slot_of), w_s)
            try:
                out.reference = _reference(x, loaded, src_routing, topk, reference_device)
            except CkptError as exc:
                out.reference_error = f"source: {exc.message}"
        return loaded

    # both checkpoints' experts at once (the reading threads are shared; both sides wait on
    # the disk, not on each other)
    with ThreadPoolExecutor(1, thread_name_prefix="ckpt-read-source") as pool:
        source = pool.submit(read_source)
        try:
            ranks, slot_of = dst.rank_layers(layer, experts=used, router=dst_router, device=device)
            dst_error = None
        except CkptError as exc:
            dst_error = exc.message
        try:
            src_layer = source.result()
            out.src_topk = (remap_experts(ids_s, src_layer.slot_of), w_s)
        except CkptError as exc:
            result.message = f"source: {exc.message}"
            return _final(out)
    if dst_error is not None:
        return _final(out, f"converted: {dst_error}")
    out.problems = [] if dst.presliced else _tp_problems(ranks[0], tp)
    out.dst_topk = (remap_experts(ids_d, slot_of), w_d)
    out.x, out.src_layer, out.src_routing = x, src_layer, src_routing
    out.ranks, out.dst_routing = ranks, dst_routing
    result.read_seconds = round(time.monotonic() - t0, 3)
    return out


def _final(out: Loaded, failure: str | None = None) -> Loaded:
    """A layer decided while loading: skipped (source problem) or ``failure`` (converted)."""
    if failure is not None:
        out.result.status, out.result.message = "failed", failure
    out.result.read_seconds = round(time.monotonic() - out.t0, 3)
    out.done = True
    return out


def compute_layer(
    loaded: Loaded, options: NumericOptions, device: str, tp: int, dst: ConvertedView
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
    if loaded.reference_error is not None:
        result.message = loaded.reference_error
        return _timed(result, t0)
    try:
        ref, decode_s, ref_s = loaded.reference or _reference(
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
