"""The forward judge: ckpt's fused-shared-expert (FSE) MXFP4 output computes what its source
computes, in vLLM's own forward pass on a CPU.

``forward_child.py`` (one process, TP 1, all loads one after the other) loads each
checkpoint with the ``ckpt_engine_judge`` plugin's capability patches, dequantizes the loaded
MXFP4 MoE and linear weights to BF16 with vLLM's own pure-torch dequantizer (amd-quark 0.13's
is HIP / CUDA only; ckpt's codecs are never used), runs vLLM's unquantized CPU methods, routes
the fused shared-expert slots as vLLM's ROCm AITER path does (a capability substitute: the CPU
router ignores fused slots; the child's docstring says how) and writes teacher-forced prompt
logprobs over ``PROMPTS``.

Compared:

- ``ckpt convert --target vllm-0.33-rocm-aiter-fse`` (shared expert in slot ``n_routed``,
  served fused) against the source served unfused (the shared expert a separate MLP);
- the same with ``--pad-to 256`` (zero-padded intermediate);
- planted faults that the tolerance must catch: routed experts 3 and 4 of layer 1 swapped, and
  the fused slot routed at weight 1 instead of vLLM's ``1/routed_scaling_factor``.

Tolerance: the fused and unfused paths differ only in BF16 rounding (the shared output is
summed in the experts' fp32 accumulator at ``1/routed_scaling_factor`` and scaled back by the
runner, instead of being rounded to BF16 and added). The synth model's logprobs sit near
``-ln(vocab)`` (-5.2 .. -6.8 nats), so a fault moves them by hundredths, not whole nats.
Measured (quark-mxfp4 synth, ``PROMPTS``, 32 predicted tokens, 2-core x86 CPU): fused vs
unfused mean |delta| 1.8e-3, max 1.4e-2 (it grows along the prompt: 2.9e-3, 7.8e-3,
1.4e-2 for 12, 7, 16 tokens); padded: the same floats as unpadded. Planted faults: swapped
experts mean 2.1e-2 / max 8.9e-2, fused slot at weight 1 mean 5.1e-2 / max 9.7e-2.
``TOL_MEAN`` = 5e-3 (about 3x the measured noise) and ``TOL_MAX`` = 2.5e-2; a fault must
exceed ``2 * TOL_MEAN`` in mean. Where routing and weights are the same, the judge is exact:
ckpt's output equals the source served through vLLM's own online FSE redirection bit for bit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from engine_checks import PROMPTS

from checkpoint_tool.vllm_run import engine_env

FSE_TARGET = "vllm-0.33-rocm-aiter-fse"
CHILD = Path(__file__).with_name("forward_child.py")
#: mean and max |delta prompt logprob| (nats) between an FSE output and its unfused source
TOL_MEAN = 5e-3
TOL_MAX = 2.5e-2


def _swap_experts(out: Path, dst: Path) -> Path:
    """ckpt's output with the down_proj of routed experts 3 and 4 of layer 1 swapped."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(out, dst)
    a, b = (f"model.layers.1.mlp.experts.{e}.down_proj.{{}}" for e in (3, 4))
    for shard in sorted(dst.glob("*.safetensors")):
        tensors = load_file(str(shard))
        for suffix in ("weight", "weight_scale"):
            x, y = a.format(suffix), b.format(suffix)
            if x in tensors:
                tensors[x], tensors[y] = tensors[y], tensors[x]
        save_file(tensors, str(shard), metadata={"format": "pt"})
    return dst


def _run(jobs: dict, python: str, work: Path) -> dict:
    names = list(jobs)
    spec = [{**jobs[n], "dump": str(work / n), "prompts": PROMPTS} for n in names]
    (work / "jobs.json").write_text(json.dumps(spec))
    env = engine_env(1)
    env.update(
        CKPT_ENGINE_JUDGE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_PLUGINS="ckpt_engine_judge"
    )
    with open(work / "log", "wb") as log:
        subprocess.run(
            [python, str(CHILD), "jobs.json", "results.json"],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=1200,
            check=False,
        )
    out = work / "results.json"
    results = json.loads(out.read_text()) if out.exists() else []
    tail = (work / "log").read_text(errors="replace")[-4000:]
    assert len(results) == len(names), f"forward child died:\n{tail}"
    return dict(zip(names, results, strict=True))


@pytest.fixture(scope="module")
def forward(vllm_python, synth_ckpt, converted, tmp_path_factory) -> tuple[dict, dict]:
    src = synth_ckpt("quark-mxfp4")
    out = converted(src, "--tp", "1", "--target", FSE_TARGET)
    padded = converted(src, "--tp", "1", "--target", FSE_TARGET, "--pad-to", "256")
    work = tmp_path_factory.mktemp("forward")
    jobs = {
        "src": {"model": str(src), "fse": False},
        "src_fused": {"model": str(src), "fse": True},  # vLLM's own online FSE redirection
        "out": {"model": str(out), "fse": True},
        "padded": {"model": str(padded), "fse": True},
        "swapped": {"model": str(_swap_experts(out, work / "swapped")), "fse": True},
        "weight1": {"model": str(out), "fse": True, "shared_weight": 1.0},
    }
    config = json.loads((src / "config.json").read_text())
    return _run(jobs, vllm_python, work), config


def _deltas(a: dict, b: dict) -> list[float]:
    for r in (a, b):
        assert r["loaded"] and r["error"] is None, r["error"]
    rows_a, rows_b = a["prompt_logprobs"], b["prompt_logprobs"]
    assert [len(r) for r in rows_a] == [len(p) - 1 for p in PROMPTS]
    assert [len(r) for r in rows_b] == [len(p) - 1 for p in PROMPTS]
    return [
        abs(x - y)
        for ra, rb in zip(rows_a, rows_b, strict=True)
        for x, y in zip(ra, rb, strict=True)
    ]


def test_every_fp4_layer_ran_dequantized(forward) -> None:
    r, config = forward
    dense = config["first_k_dense_replace"]
    moe = config["num_hidden_layers"] - dense
    # source: dense MLPs (gate_up, down) and the separate shared MLPs run as BF16 linears
    assert r["src"]["dequantized"] == {"moe": moe, "linear": 2 * dense + 2 * moe}
    assert r["src"]["fused_routers"] == 0
    for name in ("out", "padded", "src_fused"):  # FSE: shared experts in the MoE, fused
        assert r[name]["dequantized"] == {"moe": moe, "linear": 2 * dense}, name
        assert r[name]["fused_routers"] == moe, name


def test_fse_output_equals_vllms_online_fse_of_its_source(forward) -> None:
    r, _ = forward
    assert max(_deltas(r["out"], r["src_fused"])) == 0.0


@pytest.mark.parametrize("name", ["out", "padded"])
def test_fse_output_matches_its_unfused_source(forward, name: str) -> None:
    r, _ = forward
    d = _deltas(r[name], r["src"])
    mean = sum(d) / len(d)
    print(f"forward judge: {name} vs unfused source: mean |delta| {mean:.2e}, max {max(d):.2e}")
    assert mean <= TOL_MEAN and max(d) <= TOL_MAX


@pytest.mark.parametrize("name", ["swapped", "weight1"])
def test_planted_faults_exceed_the_tolerance(forward, name: str) -> None:
    r, _ = forward
    d = _deltas(r[name], r["src"])
    mean = sum(d) / len(d)
    print(f"forward judge: planted {name}: mean |delta| {mean:.2e}, max {max(d):.2e}")
    assert mean > 2 * TOL_MEAN
