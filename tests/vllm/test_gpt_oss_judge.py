"""vLLM's own gpt-oss loader judges ckpt's outputs of the ``gpt-oss`` preset (native MXFP4).

The ``ckpt_engine_judge`` plugin (docs/vllm-proof.md) replaces hardware-capability decisions
only; vLLM 0.32's ``GptOssForCausalLM`` and its ``_load_weights_mxfp4`` (``gpt_oss.py``) run
as they are: ``quant_method: mxfp4`` becomes ``GptOssMxfp4Config``, the 3-D
``gate_up_proj_blocks`` / ``_scales`` / ``_bias`` are narrowed per rank by whole scale groups
(``cdiv(I / 32, tp)`` groups, rows ``2 * start : 2 * end`` of the interleaved gate/up).

Cells: ``ckpt convert --tp 1`` and ``--tp 2`` of the tiny preset (I = 96: at TP 2 rank 0 holds
64 real intermediate rows, rank 1 32 real and 32 padded, as vLLM splits the source). Each
output is loaded at its TP and compared rank by rank with vLLM's load of the source at that
TP: every parameter equal byte for byte, except where vLLM's zero-initialised padding meets
ckpt's written padding: there both hold zero weight codes and finite scales (ckpt writes the
neutral scale 1.0, vLLM leaves 0 = 2^-127). Every (parameter, shard) and expert is written once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from judge_checks import written_once_whole

from checkpoint_tool.vllm_run.judge import JudgeJob, run_judge

PRESET = "gpt-oss"
TPS = (1, 2)


@pytest.fixture(scope="module")
def judged(vllm_python, synth_ckpt, converted, tmp_path_factory) -> dict:
    """``{("src" | "out", tp): JudgeResult}``, every load in one child."""
    src = synth_ckpt(PRESET)
    jobs = {}
    for tp in TPS:
        jobs[("src", tp)] = JudgeJob(str(src), tp)
        jobs[("out", tp)] = JudgeJob(str(converted(src, "--tp", str(tp))), tp)
    keys = list(jobs)
    results = run_judge(
        [jobs[k] for k in keys], python=vllm_python, work=tmp_path_factory.mktemp("judge")
    )
    return dict(zip(keys, results, strict=True))


def same_or_padding(out, src, *, what: str) -> int:  # type: ignore[no-untyped-def]
    """Every parameter of rank ``out`` equals ``src``'s byte for byte, but for scale bytes
    whose MXFP4 group holds zero codes in both loads (padding): there both must be finite.
    Returns the parameters compared."""
    import torch

    assert sorted(out.params) == sorted(src.params), what
    for name, a in out.params.items():
        b = src.params[name]
        assert a.shape == b.shape and out.dtypes[name] == src.dtypes[name], f"{what}: {name}"
        if torch.equal(a, b):
            continue
        assert name.endswith("_weight_scale"), f"{what}: {name} differs from the source's"
        weight = name.removesuffix("_scale")
        groups = a.shape[:-1]  # [E, rows, groups] (+ itemsize 1)
        zero = [
            p.params[weight].reshape(*groups[:-1], groups[-1], -1).eq(0).all(-1).reshape(groups)
            for p in (out, src)
        ]
        differ = a.ne(b).reshape(groups)
        assert bool((zero[0] & zero[1])[differ].all()), f"{what}: {name} differs off the padding"
        assert not bool(a.eq(0xFF).any() or b.eq(0xFF).any()), f"{what}: {name}: NaN scales"
        assert bool(differ.any())
    return len(out.params)


@pytest.mark.parametrize("tp", TPS)
def test_gpt_oss_parameters_equal_what_vllm_builds_from_the_source(judged, tp):
    out, src = judged[("out", tp)], judged[("src", tp)]
    assert out.loaded, out.failure_text()
    assert src.loaded, src.failure_text()
    assert len(out.ranks) == len(src.ranks) == tp
    for r, (a, b) in enumerate(zip(out.ranks, src.ranks, strict=True)):
        n = same_or_padding(a, b, what=f"gpt-oss tp{tp} rank {r}")
        assert n > 0
        written_once_whole(a, b)


def test_the_padded_rank_really_pads(judged):
    """At TP 2 rank 1 holds 32 real and 32 padded intermediate rows in both loads: the
    comparison above does meet padding (it can fail there)."""
    rank = judged[("out", 2)].ranks[1]
    w2 = rank.params["model.layers.0.mlp.experts.routed_experts.w2_weight"]
    # [E, H, I_rank / 2 bytes, 1]: the second half of each row (columns 32..63) is padding
    assert w2.shape[2] == 32 and not w2[:, :, 16:].any() and w2[:, :, :16].any()


def test_outputs_keep_the_producers_4d_blocks(judged, synth_ckpt, converted):
    from safetensors import safe_open

    out = Path(judged[("out", 2)].job.model)
    with safe_open(str(out / "model-00001-of-00001.safetensors"), "pt") as f:
        shape = f.get_slice("model.layers.0.mlp.experts.gate_up_proj_blocks").get_shape()
    assert shape == [8, 2 * 128, 256 // 32, 16]  # I padded 96 -> 128, [E, 2I, H/32, 16]
