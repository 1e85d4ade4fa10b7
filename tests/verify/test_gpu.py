"""The numeric check on a CUDA GPU: compiled Triton kernels with bf16 activations (skipped
without CUDA). Tolerances are bf16-level there; the torch backend stays float32."""

from __future__ import annotations

import pytest
import torch

from checkpoint_tool.verify import VerifyOptions, verify_checkpoint

from . import corrupt

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GPU = VerifyOptions(lossless=False, device="cuda", backend="triton", tokens=64)


@pytest.mark.parametrize(
    "preset", ["quark-mxfp4", "deepseek-v3-fp8", "quark-nvfp4", "quark-hybrid"]
)
def test_gpu_triton_passes(converted, preset: str) -> None:
    src, dst = converted(preset, tp=2)
    report = verify_checkpoint(dst, str(src), GPU)
    assert report.numeric.device == "cuda"
    for layer in report.numeric.layers:
        print(
            f"{preset} layer {layer.layer}: rel {layer.rel_error:.2e} max {layer.max_rel_error:.2e}"
        )
        assert layer.status == "passed", layer.message
        assert layer.rel_tolerance == 1e-2 and "bf16 activations" in layer.tolerance_basis


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gpu_deepseek_v4(converted, tp: int) -> None:
    """Hash-routed layer 0, sqrtsoftplus layer 1, MTP layer 4, the engram table."""
    src, dst = converted("deepseek-v4", tp=tp)
    report = verify_checkpoint(dst, str(src), GPU)
    assert report.passed and report.numeric.ran_layers == [0, 1, 4]
    for layer in report.numeric.layers:
        print(f"deepseek-v4 TP{tp} layer {layer.layer}: rel {layer.rel_error:.2e}")
        assert layer.status == "passed", layer.message
        assert "bf16 activations" in layer.tolerance_basis
    assert [e.status for e in report.numeric.engram] == ["passed"]


def test_gpu_torch_backend_stays_float32(converted) -> None:
    src, dst = converted("quark-hybrid", tp=2)
    report = verify_checkpoint(dst, str(src), GPU.model_copy(update={"backend": "torch"}))
    for layer in report.numeric.layers:
        assert layer.status == "passed", layer.message
        assert layer.rel_tolerance <= 1e-3 and "float32 activations" in layer.tolerance_basis


def test_gpu_catches_a_flipped_expert(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=2)
    bad = dst_copy(dst)
    corrupt.flip_bytes(bad, "model.layers.1.mlp.experts.3.up_proj.weight", 5 * 128, 64)
    (layer,) = verify_checkpoint(
        bad, str(src), GPU.model_copy(update={"layers": [1]})
    ).numeric.layers
    assert layer.status == "failed"


def test_gpu_sharded(converted) -> None:
    src, dst = converted("quark-mxfp4", tp=2, layout="vllm-sharded")
    report = verify_checkpoint(dst, str(src), GPU)
    assert report.passed and report.numeric.layout == "vllm-sharded"


@pytest.mark.parametrize("preset", ["quark-mxfp4", "deepseek-v3-fp8", "quark-nvfp4"])
def test_reference_on_the_gpu_equals_the_cpu_one(converted, preset: str) -> None:
    """The numeric check decodes the source and runs the float64 reference on the GPU: the
    same codecs and float64 sums as on the CPU, so the two agree to float32 rounding."""
    from checkpoint_tool.layers.inputs import hidden_states, remap_experts, route_tokens
    from checkpoint_tool.layers.loader import CheckpointView
    from checkpoint_tool.runtime.reference import moe_reference

    src, _ = converted(preset, tp=2)
    view = CheckpointView.open(src, semantics="producer")
    layer = view.facts.moe_layer_indices[0]
    x = hidden_states(64, view.facts.hidden_size, 0, layer)
    routing, router = view.routing(), view.router(layer)
    ids, w = route_tokens(x, router, routing, None)
    loaded = view.layer(layer, experts=sorted(set(ids.flatten().tolist())), router=router)
    topk = (remap_experts(ids, loaded.slot_of), w)
    cpu = moe_reference(x, loaded.weights, routing, topk=topk)
    gpu = moe_reference(x.cuda(), loaded.weights.to("cuda"), routing,
                        topk=(topk[0].cuda(), topk[1].cuda()))  # fmt: skip
    assert gpu.device.type == "cuda"
    rel = float((gpu.cpu().double() - cpu.double()).norm() / cpu.double().norm())
    assert rel < 1e-6, rel


def test_numeric_report_times_each_stage_on_the_gpu(converted) -> None:
    src, dst = converted("quark-mxfp4", tp=2)
    report = verify_checkpoint(dst, str(src), GPU.model_copy(update={"layers": "all"}))
    assert report.passed and report.numeric.device == "cuda"
    for r in report.numeric.layers:
        assert r.decode_seconds > 0 and r.runtime_seconds > 0 and r.read_seconds > 0


@pytest.mark.parametrize("stage", [4096, 8 << 20])
def test_staged_read_to_the_gpu_equals_the_cpu_read(converted, monkeypatch, stage: int) -> None:
    """Pinned double-buffered reads (several chunks per tensor with a 4 KiB stage) from several
    threads give the CPU read's bytes on the GPU."""
    from concurrent.futures import ThreadPoolExecutor

    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.layers import fastread

    monkeypatch.setattr(fastread, "STAGE", stage)
    _, dst = converted("quark-mxfp4", tp=2)
    cat = open_catalog(str(dst), headers_only=False)
    reader = fastread.TensorReader(cat)
    entries = [cat.get(n) for n in sorted(cat.tensors)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda e: reader.read(e, "cuda"), entries))
    assert any(e.end - e.begin > 2 * 4096 for e in entries)
    for e, t in zip(entries, got, strict=True):
        want = reader.read(e)
        assert t.device.type == "cuda" and t.dtype == want.dtype and t.shape == want.shape
        assert torch.equal(
            t.cpu().reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)
        )
    reader.close()
