"""Routing against a float64 per-token brute force written from the model definitions."""

from __future__ import annotations

import math

import pytest
import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.runtime.routing import RoutingConfig, route


def brute_force(x, w, bias, cfg: RoutingConfig):
    """Per token, in float64 and plain Python: the chosen ids and their weights."""
    logits = x.double() @ w.double().t()
    num_experts = w.shape[0]
    size = num_experts // cfg.n_group
    out = []
    for row in logits.tolist():
        if cfg.scoring_func == "softmax":
            m = max(row)
            ex = [math.exp(v - m) for v in row]
            scores = [v / sum(ex) for v in ex]
        elif cfg.scoring_func == "sigmoid":
            scores = [1 / (1 + math.exp(-v)) for v in row]
        else:  # DeepSeek-V4: sqrt(log(1 + e^l))
            scores = [math.sqrt(math.log1p(math.exp(v))) for v in row]
        choice = list(scores)
        if cfg.topk_method == "noaux_tc":
            choice = [s + float(b) for s, b in zip(scores, bias.tolist(), strict=True)]
        candidates = list(range(num_experts))
        if cfg.topk_method != "greedy" and cfg.n_group > 1:
            groups = [choice[g * size : (g + 1) * size] for g in range(cfg.n_group)]
            if cfg.topk_method == "noaux_tc":
                g_score = [sum(sorted(g, reverse=True)[:2]) for g in groups]
            else:
                g_score = [max(g) for g in groups]
            keep = sorted(range(cfg.n_group), key=lambda g: -g_score[g])[: cfg.topk_group]
            candidates = [e for e in candidates if e // size in keep]
        chosen = sorted(candidates, key=lambda e: -choice[e])[: cfg.top_k]
        weights = [scores[e] for e in chosen]
        if cfg.norm_topk_prob and cfg.top_k > 1:
            weights = [v / sum(weights) for v in weights]
        out.append({e: v * cfg.routed_scaling_factor for e, v in zip(chosen, weights, strict=True)})
    return out


CONFIGS = [
    RoutingConfig(top_k=2, scoring_func="softmax", norm_topk_prob=False),
    RoutingConfig(top_k=3, scoring_func="softmax", norm_topk_prob=True),
    RoutingConfig(
        top_k=3,
        scoring_func="softmax",
        topk_method="group_limited_greedy",
        n_group=4,
        topk_group=2,
        routed_scaling_factor=16.0,
    ),
    RoutingConfig(
        top_k=4,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
    ),
    RoutingConfig(top_k=1, scoring_func="sigmoid", topk_method="noaux_tc", norm_topk_prob=True),
    # DeepSeek-V4 (V4-Flash config.json): sqrtsoftplus, noaux_tc, renormalised, x1.5
    RoutingConfig(
        top_k=6,
        scoring_func="sqrtsoftplus",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
    ),
    RoutingConfig(top_k=2, scoring_func="sqrtsoftplus", norm_topk_prob=False),
]


@pytest.mark.parametrize(
    "cfg", CONFIGS, ids=lambda c: f"{c.scoring_func}-{c.topk_method}-k{c.top_k}"
)
def test_route_matches_brute_force(cfg: RoutingConfig) -> None:
    gen = torch.Generator().manual_seed(hash(cfg.model_dump_json()) % 1000)
    x = torch.randn(24, 32, generator=gen).to(torch.bfloat16)
    w = torch.randn(16, 32, generator=gen).to(torch.bfloat16)
    bias = torch.randn(16, generator=gen) * 0.5  # big enough to change the choice
    ids, weights = route(x, w, cfg, bias)
    assert ids.shape == weights.shape == (24, cfg.top_k)
    assert weights.dtype == torch.float32
    for t, expect in enumerate(brute_force(x, w, bias, cfg)):
        got = dict(zip(ids[t].tolist(), weights[t].tolist(), strict=True))
        assert set(got) == set(expect), f"token {t}"
        for e, v in expect.items():
            assert got[e] == pytest.approx(v, rel=1e-5), f"token {t} expert {e}"


def test_correction_bias_selects_but_does_not_weight() -> None:
    cfg = RoutingConfig(top_k=1, scoring_func="sigmoid", topk_method="noaux_tc")
    x = torch.ones(1, 4)
    w = torch.tensor([[1.0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0, 0, 0]])
    bias = torch.tensor([0.0, 0.0, 5.0])  # expert 2 has the lowest score, the biggest bias
    ids, weights = route(x, w, cfg, bias)
    assert ids.tolist() == [[2]]
    assert weights.item() == pytest.approx(0.5)  # sigmoid(0), not sigmoid(0) + 5


def test_noaux_needs_bias() -> None:
    cfg = RoutingConfig(top_k=1, scoring_func="sigmoid", topk_method="noaux_tc")
    with pytest.raises(InputError, match="e_score_correction_bias"):
        route(torch.randn(2, 4), torch.randn(3, 4), cfg, None)


def test_from_hf_config_families() -> None:
    ds = RoutingConfig.from_hf_config(
        {
            "model_type": "deepseek_v3",
            "num_experts_per_tok": 8,
            "n_routed_experts": 256,
            "scoring_func": "sigmoid",
            "topk_method": "noaux_tc",
            "n_group": 8,
            "topk_group": 4,
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
        }
    )
    assert ds == RoutingConfig(
        top_k=8,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        n_group=8,
        topk_group=4,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
    )
    qwen = RoutingConfig.from_hf_config(
        {
            "model_type": "qwen3_moe",
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "norm_topk_prob": True,
        }
    )
    assert (qwen.scoring_func, qwen.topk_method, qwen.top_k, qwen.norm_topk_prob) == (
        "softmax",
        "greedy",
        8,
        True,
    )
    glm = RoutingConfig.from_hf_config(
        {"model_type": "glm4_moe", "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1}
    )
    assert (glm.scoring_func, glm.topk_method) == ("sigmoid", "noaux_tc")


def hash_brute_force(x, w, table, tokens, cfg: RoutingConfig):
    """Per token in float64: experts table[token], weights renormalised sqrt(softplus(l))."""
    logits = (x.double() @ w.double().t()).tolist()
    out = []
    for row, tok in zip(logits, tokens.tolist(), strict=True):
        chosen = table[tok].tolist()
        scores = [math.sqrt(math.log1p(math.exp(row[e]))) for e in chosen]
        total = sum(scores) if cfg.norm_topk_prob else 1.0
        out.append(
            [
                (e, v / total * cfg.routed_scaling_factor)
                for e, v in zip(chosen, scores, strict=True)
            ]
        )
    return out


def test_hash_routing_matches_brute_force() -> None:
    cfg = RoutingConfig(
        top_k=6, scoring_func="sqrtsoftplus", norm_topk_prob=True, routed_scaling_factor=1.5
    )
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(32, 48, generator=gen)
    w = torch.randn(64, 48, generator=gen).to(torch.bfloat16)
    table = torch.stack([torch.randperm(64, generator=gen)[:6] for _ in range(100)])
    tokens = torch.randint(0, 100, (32,), generator=gen)
    bias = torch.randn(64, generator=gen) * 5  # a hash layer ignores it
    ids, weights = route(x, w, cfg, bias, input_ids=tokens, hash_table=table)
    for t, expect in enumerate(hash_brute_force(x, w, table, tokens, cfg)):
        assert ids[t].tolist() == [e for e, _ in expect], f"token {t}"
        assert weights[t].tolist() == pytest.approx([v for _, v in expect], rel=1e-5)
    # the hash choice is not the score top-k: on random data they differ for most tokens
    topk_ids, _ = route(x, w, cfg.model_copy(update={"topk_method": "noaux_tc"}), bias)
    assert (topk_ids.sort(1).values != ids.sort(1).values).any(1).sum() > 16


def test_hash_routing_errors() -> None:
    cfg = RoutingConfig(top_k=2, scoring_func="sqrtsoftplus", norm_topk_prob=True)
    x, w = torch.randn(3, 8), torch.randn(4, 8)
    table = torch.tensor([[0, 1], [2, 3], [1, -1]])
    with pytest.raises(InputError, match="needs the tokens' input ids"):
        route(x, w, cfg, input_ids=None, hash_table=table)
    with pytest.raises(InputError, match="outside the hash table's 3 rows"):
        route(x, w, cfg, input_ids=torch.tensor([0, 1, 3]), hash_table=table)
    with pytest.raises(InputError, match="outside the 4 loaded routed experts"):
        route(x, w, cfg, input_ids=torch.tensor([0, 1, 2]), hash_table=table)
    with pytest.raises(InputError, match=r"\[vocab, top_k=2\]"):
        route(x, w, cfg, input_ids=torch.tensor([0, 1, 2]), hash_table=table[:, :1])


def test_from_hf_config_deepseek_v4() -> None:
    v4 = RoutingConfig.from_hf_config(
        {
            "model_type": "deepseek_v4",
            "num_experts_per_tok": 6,
            "n_routed_experts": 256,
            "scoring_func": "sqrtsoftplus",
            "topk_method": "noaux_tc",
            "norm_topk_prob": True,
            "routed_scaling_factor": 1.5,
        }
    )
    assert v4 == RoutingConfig(
        top_k=6,
        scoring_func="sqrtsoftplus",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
    )
    # vLLM: getattr(config, "scoring_func", "sqrtsoftplus") for DeepSeek-V4
    bare = RoutingConfig.from_hf_config({"model_type": "deepseek_v4", "num_experts_per_tok": 6})
    assert (bare.scoring_func, bare.topk_method) == ("sqrtsoftplus", "noaux_tc")


def test_from_hf_config_errors() -> None:
    with pytest.raises(InputError, match="scoring_func 'sqrtrelu'"):
        RoutingConfig.from_hf_config({"num_experts_per_tok": 2, "scoring_func": "sqrtrelu"})
    with pytest.raises(InputError, match="no top-k field"):
        RoutingConfig.from_hf_config({"hidden_size": 8}, source="dense/config.json")
