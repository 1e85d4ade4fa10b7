"""vLLM judges ckpt's DeepSeek-V3 outputs: they load, and compute what the source computes.

Matrix (one engine load per checkpoint x TP x load format, shared through ``engine``):

| source (synth, vLLM MLA geometry)  | ckpt convert                                 | judged at |
|---|---|---|
| BF16, n_shared 1, I 128            | hf (the default command); vllm-sharded       | TP 2; TP 1 |
| BF16, n_shared 1, I 128            | hf and vllm-sharded with --pad-to 128 (I_r 64 -> 128) | TP 2 |
| BF16, n_shared 2, I 128            | vllm-sharded                                 | TP 2 |
| block FP8, I 256 (aligned at TP 2) | hf; vllm-sharded                             | TP 2 |
| block FP8, I 128 (I_r 64: vLLM refuses) | hf (ckpt pads); vllm-sharded            | TP 2 |

The FP8 rows load with the ``ckpt_engine_judge`` plugin's capability patches (``patched=True``):
vLLM 0.32's only CPU block-FP8 kernel refuses CPUs without AMX tiles in its ``is_supported``,
and the patch drops that test only, so they run on any x86 CPU (the kernel runs on AVX-512
too). That kernel is not deterministic under CPU contention:
two loads of the same bytes at TP 2 differed by up to 0.004 nat with two busy loops running
beside them (bit for bit when the machine is quiet), so FP8 comparisons allow ``FP8_TOLERANCE``.

Bit for bit: an unpadded output and its source at the same TP; FP8 outputs and their source
(within ``FP8_TOLERANCE``, see above)
(vLLM's block-FP8 MoE path is only compared with itself: it deviates ~1 nat from the BF16 twin
on any checkpoint once the intermediate has two K blocks); hf and vllm-sharded of the same
conversion. Padding: zero rows/columns change no sum mathematically, but vLLM's CPU kernels
accumulate a K of 128 in another order than a K of 64, so a padded BF16 output is compared with
its source within ``PAD_TOLERANCE`` (measured: 0.008 nat at most; misaligned gate/up/down rows
would be off by whole nats) and bit for bit between its two layouts.
"""

from __future__ import annotations

import json

import pytest
from engine_checks import same_logprobs

BF16 = "deepseek-v3-bf16"
FP8 = "deepseek-v3-fp8"
FSE_OFF = ("--fse", "off")
#: nats: padded BF16 vs its source (kernel accumulation order; see the module docstring)
PAD_TOLERANCE = 0.05
#: nats: two block-FP8 runs (vLLM's AMX kernel under contention; see the module docstring)
FP8_TOLERANCE = 0.02


@pytest.fixture(scope="module")
def bf16(synth_ckpt):  # type: ignore[no-untyped-def]
    return synth_ckpt(BF16)


def _close(a, b, tol: float) -> float:  # type: ignore[no-untyped-def]
    assert a.loaded, a.failure_text()
    assert b.loaded, b.failure_text()
    worst = max(
        abs(x - y)
        for ra, rb in zip(a.prompt_logprobs, b.prompt_logprobs, strict=True)
        for x, y in zip(ra, rb, strict=True)
    )
    assert worst <= tol, f"the outputs differ by {worst:.4f} nat (tolerance {tol})"
    return worst


def test_default_convert_at_tp2_loads_and_computes_the_source(engine, converted, bf16):
    out = converted(bf16, "--tp", "2")  # the command a user types: no FSE for a stock vLLM
    assert json.loads((out / "config.json").read_text())["ckpt"]["fse_layers"] == []
    same_logprobs(engine(bf16, tp=2), engine(out, tp=2))


def test_bf16_padded_hf_and_sharded_at_tp2(engine, converted, bf16):
    hf = converted(bf16, "--tp", "2", "--pad-to", "128", *FSE_OFF)
    sharded = converted(bf16, "--tp", "2", "--pad-to", "128", "--layout", "vllm-sharded", *FSE_OFF)
    cfg = json.loads((hf / "config.json").read_text())
    assert cfg["moe_intermediate_size"] == 256  # really padded: 64 -> 128 per rank
    padded = engine(hf, tp=2)
    _close(engine(bf16, tp=2), padded, PAD_TOLERANCE)
    same_logprobs(padded, engine(sharded, tp=2, load_format="sharded_state"))


def test_bf16_vllm_sharded_at_tp1_computes_the_source(engine, converted, bf16):
    out = converted(bf16, "--tp", "1", "--layout", "vllm-sharded", *FSE_OFF)
    same_logprobs(engine(bf16, tp=1), engine(out, tp=1, load_format="sharded_state"))


def test_two_shared_experts_vllm_sharded_at_tp2(engine, converted, synth_ckpt):
    src = synth_ckpt(BF16, n_shared=2)
    out = converted(src, "--tp", "2", "--layout", "vllm-sharded", *FSE_OFF)
    same_logprobs(engine(src, tp=2), engine(out, tp=2, load_format="sharded_state"))


def test_fp8_aligned_hf_and_sharded_compute_the_source(engine, converted, synth_ckpt):
    src = synth_ckpt(FP8, moe_intermediate=256)
    hf = converted(src, "--tp", "2", *FSE_OFF)
    sharded = converted(src, "--tp", "2", "--layout", "vllm-sharded", *FSE_OFF)
    ref = engine(src, tp=2, patched=True)
    _close(ref, engine(hf, tp=2, patched=True), FP8_TOLERANCE)
    _close(ref, engine(sharded, tp=2, load_format="sharded_state", patched=True), FP8_TOLERANCE)


def test_fp8_source_vllm_refuses_at_tp2_loads_after_convert(engine, converted, synth_ckpt):
    src = synth_ckpt(FP8)  # moe_intermediate 128: 64 per rank, half a 128 block
    refused = engine(src, tp=2, patched=True)
    assert not refused.loaded
    assert "not divisible by weight quantization block_k = 128" in refused.failure_text()
    hf = converted(src, "--tp", "2", *FSE_OFF)
    sharded = converted(src, "--tp", "2", "--layout", "vllm-sharded", *FSE_OFF)
    assert json.loads((hf / "config.json").read_text())["moe_intermediate_size"] == 256
    _close(
        engine(hf, tp=2, patched=True),
        engine(sharded, tp=2, load_format="sharded_state", patched=True),
        FP8_TOLERANCE,
    )
