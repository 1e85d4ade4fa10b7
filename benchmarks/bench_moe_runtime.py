"""Benchmark the MoE runtime on one GPU: DeepSeek-V3 layer shapes, every format.

Layer: hidden 7168, 256 routed experts + 1 shared expert (fused slot 256, always selected),
top-8 (DeepSeek-V3 routing: sigmoid, noaux_tc, 8 groups, top-4 groups, scaling 2.5);
intermediate 2048 (TP1) or 256 (one rank of TP8). Tokens 1, 16, 64, 256, 4096.

Per (format, TP, tokens) it prints:
- ``layer us``: the whole ``run_prepared`` (routing, align, activation quant, both grouped
  GEMMs, combine) replayed from a CUDA graph, median over runs with the L2 flushed between;
- ``gemm us``: the two grouped GEMMs alone (with the w8a8 quantization of the intermediate);
- ``GB/s`` and ``%copy``: weight + scale bytes of the experts the routing touched, over the
  layer time, against the device-to-device copy bandwidth measured in the same run
  ((read + write) / time);
- ``TFLOP/s``: 2 x rows x 3 x hidden x intermediate over the layer time;
- ``torch us``: the straightforward PyTorch baseline (``backend="torch"``: codec-dequantize each
  active expert to bf16, per-expert matmuls), same routing, timed eagerly.

Usage (on a CUDA machine)::

    python benchmarks/bench_moe_runtime.py                       # full table
    python benchmarks/bench_moe_runtime.py --formats bf16,mxfp4 --tokens 1,64 --tp 8
    python benchmarks/bench_moe_runtime.py --sweep               # tile variants, GEMMs only
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.runtime.align import align_rows
from checkpoint_tool.runtime.kernels import (
    MoeConfigs,
    choose_configs,
    down_weighted,
    gate_up_silu,
    quantize_fp8_groups,
)
from checkpoint_tool.runtime.moe import PreparedMoe, prepare_moe, run_prepared
from checkpoint_tool.runtime.routing import RoutingConfig, route
from checkpoint_tool.runtime.stack import KernelFormat
from checkpoint_tool.runtime.weights import (
    ExpertWeights,
    MoeLayerWeights,
    Projection,
)

HIDDEN = 7168
N_ROUTED = 256
INTER_TP1 = 2048
DEVICE = "cuda"
ROUTING = RoutingConfig(
    top_k=8,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    n_group=8,
    topk_group=4,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
)
FORMATS = {
    "bf16": Scheme(format=WeightFormat.UNQUANTIZED),
    "fp8": Scheme(format=WeightFormat.FP8_BLOCK, block=(128, 128), scale_suffix="weight_scale_inv"),
    "fp8_w8a8": Scheme(
        format=WeightFormat.FP8_BLOCK,
        block=(128, 128),
        scale_suffix="weight_scale_inv",
        activation="dynamic",
    ),
    "mxfp4": Scheme(
        format=WeightFormat.MXFP4, group_size=32, scale_suffix="weight_scale", scale_is_e8m0=True
    ),
    "nvfp4": Scheme(
        format=WeightFormat.NVFP4,
        group_size=16,
        scale_suffix="weight_scale",
        global_scale_suffix="weight_scale_2",
    ),
}


# --- data -----------------------------------------------------------------------------------


def _stacked_parts(fmt: str, e: int, n: int, k: int, gen: torch.Generator) -> dict:
    """Random storage for ``e`` experts of one ``[n, k]`` projection, directly on the GPU."""
    dev = DEVICE
    if fmt == "bf16":
        w = torch.randn(e, n, k, device=dev, dtype=torch.bfloat16, generator=gen) / math.sqrt(k)
        return {"weight": w}
    if fmt.startswith("fp8"):
        b = torch.randint(0, 256, (e, n, k), device=dev, dtype=torch.uint8, generator=gen)
        b[(b & 0x7F) == 0x7F] = 0  # no NaN codes
        s = torch.rand(e, -(-n // 128), -(-k // 128), device=dev, generator=gen) * 1e-3 + 1e-4
        return {"weight": b.view(torch.float8_e4m3fn), "scale": s}
    packed = torch.randint(0, 256, (e, n, k // 2), device=dev, dtype=torch.uint8, generator=gen)
    if fmt == "mxfp4":
        s = torch.randint(116, 121, (e, n, k // 32), device=dev, dtype=torch.uint8, generator=gen)
        return {"weight": packed, "scale": s}
    s = (torch.rand(e, n, k // 16, device=dev, generator=gen) * 2 + 0.25).to(torch.float8_e4m3fn)
    g = torch.rand(e, device=dev, generator=gen) * 1e-3 + 1e-3
    return {"weight": packed, "scale": s, "global_scale": g}


def make_layer(fmt: str, inter: int, seed: int = 0) -> MoeLayerWeights:
    """256 routed experts + 1 shared expert as fused slot 256; experts are views of stacks."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    n_exp = N_ROUTED + 1
    scheme = FORMATS[fmt]
    stacks = {
        "gate": _stacked_parts(fmt, n_exp, inter, HIDDEN, gen),
        "up": _stacked_parts(fmt, n_exp, inter, HIDDEN, gen),
        "down": _stacked_parts(fmt, n_exp, HIDDEN, inter, gen),
    }

    def proj(name: str, e: int) -> Projection:
        return Projection({role: t[e] for role, t in stacks[name].items()}, scheme, f"{name}.{e}")

    experts = [ExpertWeights(proj("gate", e), proj("up", e), proj("down", e)) for e in range(n_exp)]
    router = torch.randn(N_ROUTED, HIDDEN, device=DEVICE, generator=gen) / math.sqrt(HIDDEN)
    bias = torch.randn(N_ROUTED, device=DEVICE, generator=gen) * 0.01
    return MoeLayerWeights(
        experts=experts,
        router_weight=router.to(torch.bfloat16),
        e_score_correction_bias=bias,
        n_fused_shared=1,
    )


def expert_bytes(layer: MoeLayerWeights) -> int:
    ex = layer.experts[0]
    return sum(t.numel() * t.element_size() for p in ex.projections() for t in p.parts.values())


# --- timing ---------------------------------------------------------------------------------

_FLUSH: torch.Tensor | None = None


def _flush_l2() -> None:
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(512 * 2**20, dtype=torch.uint8, device=DEVICE)
    _FLUSH.zero_()


def time_fn(fn: Callable[[], object], reps: int, *, graph: bool = True) -> tuple[float, bool]:
    """Median microseconds of ``fn`` (CUDA-graph replay when capturable), L2 flushed each run."""
    if DEVICE == "cpu":  # --smoke: check the script itself, times mean nothing
        fn()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6, False
    fn()
    torch.cuda.synchronize()
    run = fn
    captured = False
    if graph:
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            run = g.replay
            captured = True
        except Exception as exc:
            print(f"  (graph capture failed, timing eagerly: {exc!r:.120})", flush=True)
            torch.cuda.synchronize()
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        _flush_l2()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times), captured


def copy_bandwidth() -> float:
    """Device-to-device copy GB/s, (bytes read + bytes written) / time, 4 GiB buffers."""
    n = 4 * 2**30 if DEVICE == "cuda" else 2**20
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    us, _ = time_fn(lambda: dst.copy_(src), 20, graph=False)
    return 2 * n / (us * 1e-6) / 1e9


def reps_for(tokens: int) -> int:
    return 50 if tokens <= 64 else (20 if tokens <= 256 else 6)


# --- measurements ---------------------------------------------------------------------------


def gemm_fn(prepared: PreparedMoe, x: torch.Tensor, topk, configs: MoeConfigs | None = None):
    """The two grouped GEMMs of the routed group alone (aligned rows precomputed)."""
    layer = prepared.layer
    group = prepared.ranks[0].routed
    ids, weights = topk
    slots = torch.full((x.shape[0], 1), layer.n_routed, device=x.device)
    ids = torch.cat([ids, slots], dim=1)
    weights = torch.cat([weights, torch.ones_like(weights[:, :1])], dim=1).reshape(-1)
    cfgs = configs or choose_configs(
        group.gate.fmt,
        group.down.fmt,
        rows=ids.numel(),
        num_experts=group.gate.num_experts,
        hidden=group.down.n,
        intermediate=group.gate.n,
        device=x.device,
    )
    aligned = align_rows(ids, group.gate.num_experts, cfgs.block_m)
    w8a8_in = group.gate.fmt is KernelFormat.FP8_W8A8
    w8a8_mid = group.down.fmt is KernelFormat.FP8_W8A8
    a, a_s = quantize_fp8_groups(x) if w8a8_in else (x, None)
    h_dtype = torch.float32 if w8a8_mid else x.dtype

    def run() -> torch.Tensor:
        h = gate_up_silu(a, a_s, group.gate, group.up, aligned, cfgs.gate_up, out_dtype=h_dtype)
        h, h_s = quantize_fp8_groups(h) if w8a8_mid else (h, None)
        return down_weighted(h, h_s, group.down, aligned, weights, cfgs.down, out_dtype=x.dtype)

    return run, cfgs


def measure(fmt: str, tp: int, token_list: list[int], copy_gbs: float, baseline: bool) -> list:
    inter = INTER_TP1 // tp
    t0 = time.time()
    layer = make_layer(fmt, inter)
    w8a8 = fmt == "fp8_w8a8"
    prepared = prepare_moe(layer, w8a8=w8a8)
    prepared_torch = prepare_moe(layer, w8a8=w8a8, backend="torch")
    per_expert = expert_bytes(layer)
    print(f"[{fmt} tp{tp}] layer ready in {time.time() - t0:.1f}s", flush=True)
    rows = []
    for tokens in token_list:
        gen = torch.Generator(device=DEVICE).manual_seed(tokens)
        x = torch.randn(tokens, HIDDEN, device=DEVICE, generator=gen).to(torch.bfloat16)
        topk = route(x, layer.router_weight, ROUTING, layer.e_score_correction_bias)
        active = int(torch.unique(topk[0]).numel()) + 1  # + the shared slot
        reps = reps_for(tokens)
        t1 = time.time()
        layer_us, captured = time_fn(lambda x=x: run_prepared(x, prepared, ROUTING), reps)
        run, cfgs = gemm_fn(prepared, x, topk)
        gemm_us, _ = time_fn(run, reps)
        torch_us = float("nan")
        if baseline:
            torch_us, _ = time_fn(
                lambda x=x: run_prepared(x, prepared_torch, ROUTING, backend="torch"),
                max(3, reps // 10),
                graph=False,
            )
        nbytes = active * per_expert
        flops = 2 * tokens * (ROUTING.top_k + 1) * 3 * HIDDEN * inter
        row = {
            "format": fmt,
            "tp": tp,
            "tokens": tokens,
            "active_experts": active,
            "weight_mb": nbytes / 1e6,
            "layer_us": layer_us,
            "gemm_us": gemm_us,
            "gbs": nbytes / (layer_us * 1e-6) / 1e9,
            "gemm_gbs": nbytes / (gemm_us * 1e-6) / 1e9,
            "pct_copy": 100 * nbytes / (layer_us * 1e-6) / 1e9 / copy_gbs,
            "gemm_pct_copy": 100 * nbytes / (gemm_us * 1e-6) / 1e9 / copy_gbs,
            "tflops": flops / (layer_us * 1e-6) / 1e12,
            "torch_us": torch_us,
            "graph": captured,
            "block_m": cfgs.block_m,
            "split": (cfgs.gate_up.split_k, cfgs.down.split_k),
        }
        rows.append(row)
        print(
            f"  T={tokens:5d} layer {layer_us:9.1f} us  gemm {gemm_us:9.1f} us  "
            f"{row['gbs']:7.0f} GB/s ({row['pct_copy']:4.1f}% copy; gemm {row['gemm_pct_copy']:4.1f}%)  "
            f"{row['tflops']:6.1f} TFLOP/s  torch {torch_us:10.1f} us  [{time.time() - t1:.1f}s]",
            flush=True,
        )
    return rows


def print_table(rows: list, copy_gbs: float) -> None:
    print(f"\ndevice-to-device copy: {copy_gbs:.0f} GB/s ((read + write) / time)")
    head = (
        f"| {'format':8} | TP | tokens | experts | weights MB | layer us | gemm us | GB/s | "
        f"% copy | gemm % copy | TFLOP/s | torch us | speed-up |"
    )
    print(head)
    print("|" + "|".join("---" for _ in range(head.count("|") - 1)) + "|")
    for r in rows:
        print(
            f"| {r['format']:8} | {r['tp']} | {r['tokens']} | {r['active_experts']} | "
            f"{r['weight_mb']:.0f} | {r['layer_us']:.1f} | {r['gemm_us']:.1f} | {r['gbs']:.0f} | "
            f"{r['pct_copy']:.1f} | {r['gemm_pct_copy']:.1f} | {r['tflops']:.1f} | "
            f"{r['torch_us']:.0f} | {r['torch_us'] / r['layer_us']:.1f}x |"
        )


# --- tile sweep -----------------------------------------------------------------------------


def sweep(formats: list[str], points: list[tuple[int, int]]) -> None:
    """GEMM-only time of tile variants around the heuristic, per (tp, tokens) point."""
    for fmt in formats:
        for tp in sorted({tp for tp, _ in points}):
            layer = make_layer(fmt, INTER_TP1 // tp)
            prepared = prepare_moe(layer, w8a8=fmt == "fp8_w8a8")
            for _, tokens in [p for p in points if p[0] == tp]:
                x = torch.randn(tokens, HIDDEN, device=DEVICE).to(torch.bfloat16)
                topk = route(x, layer.router_weight, ROUTING, layer.e_score_correction_bias)
                _, base = gemm_fn(prepared, x, topk)
                for name, cfgs in _variants(base, fmt).items():
                    try:
                        run, _ = gemm_fn(prepared, x, topk, cfgs)
                        us, _ = time_fn(run, reps_for(tokens))
                        print(
                            f"sweep {fmt:8} tp{tp} T={tokens:5d} {name:28} {us:9.1f} us", flush=True
                        )
                    except Exception as exc:
                        print(f"sweep {fmt:8} tp{tp} T={tokens:5d} {name:28} failed {exc!r:.100}")
            del prepared, layer
            torch.cuda.empty_cache()


def _variants(base: MoeConfigs, fmt: str) -> dict[str, MoeConfigs]:
    from dataclasses import replace

    g, d = base.gate_up, base.down
    out = {"heuristic": base}
    fp4 = fmt in ("mxfp4", "nvfp4")
    if base.block_m <= 32:
        for bn in (32, 128):
            out[f"bn{bn}"] = MoeConfigs(replace(g, block_n=bn), replace(d, block_n=bn))
        for st in (3, 5):
            out[f"stages{st}"] = MoeConfigs(replace(g, num_stages=st), replace(d, num_stages=st))
        bk = 512 if fp4 else 256
        out[f"bk{bk}-st3"] = MoeConfigs(
            replace(g, block_k=bk, num_stages=3), replace(d, block_k=bk, num_stages=3)
        )
        out["split x2"] = MoeConfigs(
            replace(g, split_k=g.split_k * 2), replace(d, split_k=d.split_k * 2)
        )
        out["warps8-bn128"] = MoeConfigs(
            replace(g, num_warps=8, block_n=128), replace(d, num_warps=8, block_n=128)
        )
    else:
        out["bm128-w8"] = MoeConfigs(
            replace(g, block_m=128, num_warps=8), replace(d, block_m=128, num_warps=8)
        )
        out["bn256-w8"] = MoeConfigs(
            replace(g, block_n=256, num_warps=8), replace(d, block_n=256, num_warps=8)
        )
        out["stages4"] = MoeConfigs(replace(g, num_stages=4), replace(d, num_stages=4))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default="bf16,fp8,fp8_w8a8,mxfp4,nvfp4")
    ap.add_argument("--tokens", default="1,16,64,256,4096")
    ap.add_argument("--tp", default="1,8")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--sweep", action="store_true", help="time tile variants (GEMMs only)")
    ap.add_argument("--sweep-points", default="1:1,1:64,8:1,8:64,1:4096")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on CPU (tests the script)")
    args = ap.parse_args()
    formats = args.formats.split(",")
    if args.smoke:
        global DEVICE, HIDDEN, N_ROUTED, INTER_TP1
        DEVICE, HIDDEN, N_ROUTED, INTER_TP1 = "cpu", 256, 16, 256
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (smoke)"
    print(f"{name} torch {torch.__version__}", flush=True)
    if args.sweep:
        pts = [tuple(int(v) for v in p.split(":")) for p in args.sweep_points.split(",")]
        sweep(formats, pts)  # type: ignore[arg-type]
        return
    copy_gbs = copy_bandwidth()
    print(f"copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    rows = []
    for tp in (int(v) for v in args.tp.split(",")):
        for fmt in formats:
            rows += measure(
                fmt, tp, [int(v) for v in args.tokens.split(",")], copy_gbs, not args.no_baseline
            )
            if DEVICE == "cuda":
                torch.cuda.empty_cache()  # the layer of this format is gone
            if args.json:  # after every format: a cut-short run keeps what it measured
                args.json.write_text(json.dumps({"copy_gbs": copy_gbs, "rows": rows}, indent=1))
    print_table(rows, copy_gbs)


if __name__ == "__main__":
    main()
