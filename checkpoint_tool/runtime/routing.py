"""Token routing of one MoE layer, as the model's config.json defines it.

Scores are ``softmax``, ``sigmoid`` or ``sqrtsoftplus`` (DeepSeek-V4: ``sqrt(softplus(l))``)
of the float32 router logits ``l = x @ W_router^T``.
Experts are chosen greedily (top-k), by ``group_limited_greedy`` (DeepSeek-V2: keep the
``topk_group`` best of ``n_group`` groups by their best score) or by ``noaux_tc``
(DeepSeek-V3 / GLM-4 MoE: ``e_score_correction_bias`` is added to the scores *for the
selection only*; a group's score is the sum of its two best biased scores). The weights are
the unbiased scores of the chosen experts, renormalised to sum 1 when ``norm_topk_prob``,
then multiplied by ``routed_scaling_factor`` (applied per routed weight here; vLLM applies it
to the routed sum, the same up to rounding).

DeepSeek-V4 (vLLM 0.33 ``model_executor/layers/fused_moe/router/cpu_router.py``
``_sqrtsoftplus_bias_topk``, the reference of the CUDA ``dsv4_topk`` / ``topk_hash_softplus_sqrt``
kernels): weight ``sqrt(softplus(l))``, experts chosen by ``weight + e_score_correction_bias``
(no groups), unbiased weights renormalised and times ``routed_scaling_factor``. Its first
``num_hash_layers`` layers are *hash-routed*: the experts are ``tid2eid[input_id]`` (a
``[vocab, top_k]`` table, ``ffn.gate.tid2eid``), no top-k and no bias; the weights are the
same renormalised ``sqrt(softplus(l))`` of those experts. (vLLM is followed; DeepSeek's own
inference code was not available to compare against.)

Example (DeepSeek-V3 config.json fields)::

    cfg = RoutingConfig.from_hf_config({"num_experts_per_tok": 8, "scoring_func": "sigmoid",
        "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "n_routed_experts": 256})
    ids, weights = route(x, router_weight, cfg, correction_bias)   # [T, 8] int64, float32
    # DeepSeek-V4 hash layer: experts from the token ids
    ids, weights = route(x, w, v4_cfg, input_ids=tok [T], hash_table=tid2eid [vocab, 6])
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict

from checkpoint_tool.errors import InputError
from checkpoint_tool.model.families import routing_defaults

ScoringFunc = Literal["softmax", "sigmoid", "sqrtsoftplus"]
TopkMethod = Literal["greedy", "group_limited_greedy", "noaux_tc"]

#: config.json keys that name the number of experts chosen per token, by family
_TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "n_activated_experts", "top_k")


class RoutingConfig(BaseModel):
    """How a layer picks and weights its experts (the config.json routing fields)."""

    model_config = ConfigDict(frozen=True)

    top_k: int
    scoring_func: ScoringFunc = "softmax"
    topk_method: TopkMethod = "greedy"
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = False
    routed_scaling_factor: float = 1.0

    @classmethod
    def from_hf_config(
        cls, config: dict[str, Any], *, source: str = "config.json"
    ) -> RoutingConfig:
        """Read the routing fields of a DeepSeek / GLM / Qwen MoE ``config.json``.

        Unknown scoring functions or top-k methods raise ``InputError`` naming the key.
        """
        # what a model type assumes when config.json omits them: family data
        # (model/families_data/families.yaml ``routing``), else softmax / greedy
        defaults = routing_defaults(str(config.get("model_type", "")))
        keys = (*_TOP_K_KEYS, *((defaults.top_k,) if defaults and defaults.top_k else ()))
        top_k = next((config[k] for k in keys if config.get(k) is not None), None)
        if top_k is None:
            raise InputError(
                f"{source}: no top-k field ({' / '.join(keys)}); "
                "this is not a MoE config, or pass the routing config explicitly"
            )
        if isinstance(top_k, list):
            # a top-k per layer (Hunyuan's moe_topk; vLLM's Transformers backend picks
            # entry layer_idx, transformers/moe.py maybe_per_layer): one value routes them all
            if not top_k or len(set(top_k)) != 1:
                raise InputError(
                    f"{source}: the top-k per layer {top_k[:8]!r} is not one value; the "
                    "runtime routes every layer with one top-k"
                )
            top_k = top_k[0]
        scoring = config.get("scoring_func") or (defaults.scoring_func if defaults else "softmax")
        method = config.get("topk_method") or (defaults.topk_method if defaults else "greedy")
        if scoring not in ("softmax", "sigmoid", "sqrtsoftplus"):
            raise InputError(
                f"{source}: scoring_func {scoring!r} is not supported by the runtime "
                "(supported: softmax, sigmoid, sqrtsoftplus)"
            )
        if method not in ("greedy", "group_limited_greedy", "noaux_tc"):
            raise InputError(
                f"{source}: topk_method {method!r} is not supported by the runtime "
                "(supported: greedy, group_limited_greedy, noaux_tc)"
            )
        return cls(
            top_k=int(top_k),
            scoring_func=scoring,
            topk_method=method,
            n_group=int(config.get("n_group") or 1),
            topk_group=int(config.get("topk_group") or 1),
            norm_topk_prob=bool(
                config.get(
                    "norm_topk_prob",
                    bool(defaults and defaults.norm_topk_prob),
                )
            ),
            routed_scaling_factor=float(config.get("routed_scaling_factor") or 1.0),
        )


def router_logits(x: torch.Tensor, router_weight: torch.Tensor) -> torch.Tensor:
    """float32 logits ``[T, E]`` of ``x [T, H]`` against the router weight ``[E, H]``."""
    return x.float() @ router_weight.float().t()


def scores_of(logits: torch.Tensor, scoring_func: ScoringFunc) -> torch.Tensor:
    """float32 expert scores of float32 logits ``[T, E]``.

    ``sqrtsoftplus``: ``sqrt(softplus(l))`` (vLLM ``cpu_router._sqrtsoftplus_bias_topk`` and
    the ``biased_topk_cpu`` / ``hash_topk_cpu`` kernels it calls; torch's softplus switches to
    the identity above 20, where ``log1p(exp(l))`` rounds to ``l`` in float32 anyway).
    """
    if scoring_func == "softmax":
        return logits.softmax(dim=-1)
    if scoring_func == "sigmoid":
        return logits.sigmoid()
    return torch.nn.functional.softplus(logits).sqrt()


def route(
    x: torch.Tensor,
    router_weight: torch.Tensor,
    cfg: RoutingConfig,
    correction_bias: torch.Tensor | None = None,
    *,
    input_ids: torch.Tensor | None = None,
    hash_table: torch.Tensor | None = None,
    router_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose ``cfg.top_k`` experts per token: ids ``[T, k]`` int64, weights ``[T, k]`` float32.

    ``router_bias`` ``[E]`` is the router linear's own bias, added to the logits (gpt-oss
    ``mlp.router.bias``: vLLM ``gpt_oss.py`` ``MLPBlock`` builds ``GateLinear(..., bias=True)``),
    unlike ``correction_bias``, which only steers the choice.

    The weights already include ``routed_scaling_factor``. ``hash_table`` ``[vocab, k]`` (a
    DeepSeek-V4 hash layer's ``tid2eid``) picks the experts of token ``input_ids[t]`` instead
    of a top-k; the bias is then unused (vLLM: "hash MoE doesn't use e_score_correction_bias").
    """
    logits = router_logits(x, router_weight)
    if router_bias is not None:
        logits = logits + router_bias.float().to(logits.device)
    num_experts = logits.shape[1]
    if cfg.top_k > num_experts:
        raise InputError(f"routing: top_k {cfg.top_k} exceeds the {num_experts} routed experts")
    scores = scores_of(logits, cfg.scoring_func)
    if hash_table is not None:
        ids = hash_ids(hash_table, input_ids, cfg.top_k, num_experts).to(scores.device)
        return _weights(scores, ids, cfg)

    choice = scores
    if cfg.topk_method == "noaux_tc":
        if correction_bias is None:
            raise InputError(
                "routing: topk_method noaux_tc needs the layer's e_score_correction_bias tensor"
            )
        choice = scores + correction_bias.float().to(scores.device)
    # vLLM's sqrtsoftplus routing has no expert groups (``_sqrtsoftplus_bias_topk``)
    if cfg.topk_method != "greedy" and cfg.n_group > 1 and cfg.scoring_func != "sqrtsoftplus":
        choice = _mask_groups(choice, cfg)

    ids = torch.topk(choice, cfg.top_k, dim=-1, sorted=True).indices
    return _weights(scores, ids, cfg)


def _weights(
    scores: torch.Tensor, ids: torch.Tensor, cfg: RoutingConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    weights = scores.gather(1, ids)
    if cfg.norm_topk_prob and cfg.top_k > 1:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return ids, weights * cfg.routed_scaling_factor


def hash_ids(
    table: torch.Tensor, input_ids: torch.Tensor | None, top_k: int, num_experts: int
) -> torch.Tensor:
    """int64 ``[T, k]`` experts of a hash-routed layer: ``table[input_ids]``, checked.

    An id outside ``0..num_experts-1`` (e.g. an expert not loaded, ``-1``) is an ``InputError``.
    """
    if input_ids is None:
        raise InputError("routing: a hash-routed layer (tid2eid) needs the tokens' input ids")
    if table.dim() != 2 or table.shape[1] != top_k:
        raise InputError(
            f"routing: hash table (tid2eid) shape {tuple(table.shape)} != [vocab, top_k={top_k}]"
        )
    tok = input_ids.long().cpu().reshape(-1)
    if tok.numel() and (int(tok.min()) < 0 or int(tok.max()) >= table.shape[0]):
        raise InputError(
            f"routing: input ids outside the hash table's {table.shape[0]} rows (vocab)"
        )
    ids = table.cpu().long()[tok]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_experts):
        raise InputError(
            f"routing: hash table (tid2eid) names expert {int(ids.min())}..{int(ids.max())}, "
            f"outside the {num_experts} loaded routed experts"
        )
    return ids


def _mask_groups(choice: torch.Tensor, cfg: RoutingConfig) -> torch.Tensor:
    """Keep only the ``topk_group`` best expert groups per token (others -> -inf)."""
    num_tokens, num_experts = choice.shape
    if num_experts % cfg.n_group:
        raise InputError(
            f"routing: {num_experts} experts do not split into n_group={cfg.n_group} groups"
        )
    if not 1 <= cfg.topk_group <= cfg.n_group:
        raise InputError(f"routing: topk_group {cfg.topk_group} not in 1..n_group {cfg.n_group}")
    grouped = choice.view(num_tokens, cfg.n_group, num_experts // cfg.n_group)
    if cfg.topk_method == "noaux_tc":
        group_scores = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(dim=-1)
    else:
        group_scores = grouped.max(dim=-1).values
    best = group_scores.topk(cfg.topk_group, dim=-1, sorted=False).indices
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
    keep = keep.unsqueeze(-1).expand_as(grouped).reshape(num_tokens, num_experts)
    return choice.masked_fill(~keep, float("-inf"))
