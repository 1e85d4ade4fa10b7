"""vLLM judges ckpt's DeepSeek-V3 outputs: they load, and compute what the source computes.

Matrix (one engine load per checkpoint x TP x load format, shared through ``engine``):

| source (synth, vLLM MLA geometry)  | ckpt convert                                | judged at |
|---|---|---|
| BF16, n_shared 1, I 128            | hf --pad-to 128 (I_r 64 -> 128); vllm-sharded --pad-to 128; vllm-sharded | TP 2, 2, 1 |
| BF16, n_shared 2, I 128            | vllm-sharded --pad-to 128                   | TP 2 |
| block FP8, I 256 (aligned at TP 2) | hf; vllm-sharded                            | TP 2 |
| block FP8, I 128 (I_r 64: vLLM refuses) | hf (ckpt pads); vllm-sharded           | TP 2 |

BF16: prompt logprobs of the output equal the source's at the same TP, bit for bit (padding
adds zero rows/columns, which changes no sum). FP8: vLLM's block-FP8 MoE path is compared with
itself only (it deviates ~1 nat from the BF16 twin on any checkpoint once the intermediate has
two K blocks), so hf == source and hf == vllm-sharded bit for bit.
"""

from __future__ import annotations

import json

import pytest

BF16 = "deepseek-v3-bf16"
FP8 = "deepseek-v3-fp8"
FSE_OFF = ("--fse", "off")


def _same(a, b) -> None:  # type: ignore[no-untyped-def]
    assert a.loaded, a.failure_text()
    assert b.loaded, b.failure_text()
    assert a.prompt_logprobs and all(len(r) > 1 for r in a.prompt_logprobs)
    assert a.prompt_logprobs == b.prompt_logprobs


@pytest.fixture(scope="module")
def bf16(synth_ckpt):  # type: ignore[no-untyped-def]
    return synth_ckpt(BF16)


def test_bf16_padded_hf_at_tp2_computes_the_source(engine, converted, bf16):
    out = converted(bf16, "--tp", "2", "--pad-to", "128", *FSE_OFF)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["moe_intermediate_size"] == 256  # really padded: 64 -> 128 per rank
    _same(engine(bf16, tp=2), engine(out, tp=2))


def test_bf16_padded_vllm_sharded_at_tp2_computes_the_source(engine, converted, bf16):
    out = converted(bf16, "--tp", "2", "--pad-to", "128", "--layout", "vllm-sharded", *FSE_OFF)
    assert sorted(p.name for p in out.glob("model-rank-*"))[0].startswith("model-rank-0-part-0")
    _same(engine(bf16, tp=2), engine(out, tp=2, load_format="sharded_state"))


def test_bf16_vllm_sharded_at_tp1_computes_the_source(engine, converted, bf16):
    out = converted(bf16, "--tp", "1", "--layout", "vllm-sharded", *FSE_OFF)
    _same(engine(bf16, tp=1), engine(out, tp=1, load_format="sharded_state"))


def test_two_shared_experts_padded_vllm_sharded_at_tp2(engine, converted, synth_ckpt):
    src = synth_ckpt(BF16, n_shared=2)
    out = converted(src, "--tp", "2", "--pad-to", "128", "--layout", "vllm-sharded", *FSE_OFF)
    _same(engine(src, tp=2), engine(out, tp=2, load_format="sharded_state"))


def test_fp8_aligned_hf_and_sharded_compute_the_source(engine, converted, synth_ckpt):
    src = synth_ckpt(FP8, moe_intermediate=256)
    hf = converted(src, "--tp", "2", *FSE_OFF)
    sharded = converted(src, "--tp", "2", "--layout", "vllm-sharded", *FSE_OFF)
    ref = engine(src, tp=2)
    _same(ref, engine(hf, tp=2))
    _same(ref, engine(sharded, tp=2, load_format="sharded_state"))


def test_fp8_source_vllm_refuses_at_tp2_loads_after_convert(engine, converted, synth_ckpt):
    src = synth_ckpt(FP8)  # moe_intermediate 128: 64 per rank, half a 128 block
    refused = engine(src, tp=2)
    assert not refused.loaded
    assert "not divisible by weight quantization block_k = 128" in refused.failure_text()
    hf = converted(src, "--tp", "2", *FSE_OFF)
    sharded = converted(src, "--tp", "2", "--layout", "vllm-sharded", *FSE_OFF)
    assert json.loads((hf / "config.json").read_text())["moe_intermediate_size"] == 256
    _same(engine(hf, tp=2), engine(sharded, tp=2, load_format="sharded_state"))
