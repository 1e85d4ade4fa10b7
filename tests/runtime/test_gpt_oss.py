"""gpt-oss layers: expert and router biases, interleaved gate/up rows, the clamped swigluoai.

The layer is drawn as gpt-oss stores it (``gate_up_proj_blocks`` U8 ``[E, 2I, H/32, 16]`` with
interleaved rows, ``_scales`` U8 ``[E, 2I, H/32]``, ``_bias`` ``[E, 2I]``, the down triple, the
router with its bias) and computed here in float64 straight from those arrays: FP4 codes by
ml_dtypes, E8M0 as powers of two, ``[g0, u0, g1, u1, ...]`` taken apart by stride, softmax
over the top-k logits, ``g * sigmoid(1.702 g) * (u + 1)`` on clamped inputs (vLLM 0.33
``SwigluOAIAndMul.forward_native``). Neither the codecs nor ``runtime.reference`` is used for
that brute force; the runtime (both backends, TP 1 and 2 with padding) and the reference are
checked against it. The scales are large enough that many gate/up values are clamped (the
test checks the share), so an implementation without the clamp, the ``+ 1``, the alpha or a
bias fails by far.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.runtime.interleave import split_interleaved
from checkpoint_tool.runtime.moe import run_moe
from checkpoint_tool.runtime.reference import moe_reference
from checkpoint_tool.runtime.routing import RoutingConfig
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights, Projection

MXFP4 = Scheme(
    format=WeightFormat.MXFP4,
    weight_dtypes=("U8",),
    group_size=32,
    scale_suffix="scales",
    scale_dtypes=("U8",),
    scale_is_e8m0=True,
)
# gpt-oss config.json has no routing keys; vLLM's MLPBlock: softmax, renormalize=True
ROUTING = RoutingConfig.from_hf_config({"model_type": "gpt_oss", "num_experts_per_tok": 2})
H, INTER, E = (
    64,
    96,
    4,
)  # INTER = 96: at TP 2 each rank holds 64 rows (48 real, padded to the group)


def gpt_oss_arrays(seed: int) -> dict[str, np.ndarray]:
    """One layer's tensors as gpt-oss stores them (fresh random bytes per seed)."""
    rng = np.random.default_rng(seed)
    return {
        "gate_up_blocks": rng.integers(0, 256, (E, 2 * INTER, H // 32, 16), dtype=np.uint8),
        "gate_up_scales": rng.integers(124, 128, (E, 2 * INTER, H // 32), dtype=np.uint8),
        "gate_up_bias": (rng.standard_normal((E, 2 * INTER)) * 2).astype(np.float32),
        "down_blocks": rng.integers(0, 256, (E, H, INTER // 32, 16), dtype=np.uint8),
        "down_scales": rng.integers(118, 122, (E, H, INTER // 32), dtype=np.uint8),
        "down_bias": rng.standard_normal((E, H)).astype(np.float32),
        "router_weight": (rng.standard_normal((E, H)) * 0.3).astype(np.float32),
        "router_bias": rng.standard_normal(E).astype(np.float32),
    }


def decode(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float64 ``[rows, cols]`` of one expert's ``[rows, cols/32, 16]`` blocks: the low
    nibble is the even element (ml_dtypes E2M1 values), times 2^(scale - 127)."""
    lo, hi = blocks & 0x0F, blocks >> 4
    codes = np.stack([lo, hi], axis=-1).reshape(blocks.shape[0], -1)
    # ml_dtypes' float4_e2m1fn is stored one per byte: the byte's low nibble is the code
    values = codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    exp = np.repeat(scales.astype(np.float64) - 127.0, 32, axis=-1)
    return values * np.exp2(exp)


def brute_force(arr: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """float64 ``[T, H]`` of the layer, from the stored arrays alone."""
    logits = x @ arr["router_weight"].astype(np.float64).T + arr["router_bias"]
    out = np.zeros((x.shape[0], H))
    for t in range(x.shape[0]):
        top = np.argsort(-logits[t], kind="stable")[: ROUTING.top_k]
        w = np.exp(logits[t, top] - logits[t, top].max())
        w /= w.sum()
        for e, wt in zip(top, w, strict=True):
            gu = decode(arr["gate_up_blocks"][e], arr["gate_up_scales"][e])
            h = gu @ x[t] + arr["gate_up_bias"][e]
            g, u = h[0::2], h[1::2]
            g = np.minimum(g, 7.0)
            u = np.clip(u, -7.0, 7.0)
            act = g / (1 + np.exp(-1.702 * g)) * (u + 1)
            down = decode(arr["down_blocks"][e], arr["down_scales"][e])
            out[t] += wt * (down @ act + arr["down_bias"][e])
    return out


def runtime_layer(arr: dict[str, np.ndarray]) -> MoeLayerWeights:
    """The runtime's layer: each expert's interleaved gate_up split by ``split_interleaved``."""
    experts = []
    for e in range(E):
        gu = Projection(
            {
                "weight": torch.from_numpy(arr["gate_up_blocks"][e].reshape(2 * INTER, H // 2)),
                "scale": torch.from_numpy(arr["gate_up_scales"][e]),
            },
            MXFP4,
            f"experts.gate_up_proj[{e}]",
            torch.from_numpy(arr["gate_up_bias"][e]),
        )
        down = Projection(
            {
                "weight": torch.from_numpy(arr["down_blocks"][e].reshape(H, INTER // 2)),
                "scale": torch.from_numpy(arr["down_scales"][e]),
            },
            MXFP4,
            f"experts.down_proj[{e}]",
            torch.from_numpy(arr["down_bias"][e]),
        )
        experts.append(ExpertWeights(*split_interleaved(gu), down))
    return MoeLayerWeights(
        experts=experts,
        router_weight=torch.from_numpy(arr["router_weight"]),
        router_bias=torch.from_numpy(arr["router_bias"]),
        activation="swigluoai",
        swiglu_limit=7.0,
    )


def rel(a: torch.Tensor, b: np.ndarray) -> float:
    ref = torch.from_numpy(b)
    return float((a.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("seed", [1, 2])
def test_reference_matches_the_brute_force(seed: int) -> None:
    arr = gpt_oss_arrays(seed)
    x = np.random.default_rng(seed + 50).standard_normal((12, H)).astype(np.float32)
    want = brute_force(arr, x.astype(np.float64))
    got = moe_reference(torch.from_numpy(x), runtime_layer(arr), ROUTING)
    assert rel(got, want) < 1e-6


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("tp", [1, 2])
def test_runtime_matches_the_brute_force(backend: str, tp: int) -> None:
    arr = gpt_oss_arrays(7)
    x = np.random.default_rng(8).standard_normal((10, H)).astype(np.float32)
    want = brute_force(arr, x.astype(np.float64))
    got = run_moe(torch.from_numpy(x), runtime_layer(arr), ROUTING, backend=backend, tp=tp)
    assert rel(got, want) < 1e-5


def test_the_clamp_bites_and_every_term_counts() -> None:
    """Many pre-activations exceed the limit; dropping a bias or the ``+ 1`` moves the output."""
    arr = gpt_oss_arrays(3)
    x = np.random.default_rng(4).standard_normal((16, H))
    gu = decode(arr["gate_up_blocks"][0], arr["gate_up_scales"][0])
    h = x @ gu.T + arr["gate_up_bias"][0]
    share = float(((h[:, 0::2] > 7) | (np.abs(h[:, 1::2]) > 7)).mean())
    assert share > 0.2
    want = brute_force(arr, x)
    for key in ("gate_up_bias", "down_bias", "router_bias"):
        other = dict(arr, **{key: np.zeros_like(arr[key])})
        got = moe_reference(torch.from_numpy(x).float(), runtime_layer(other), ROUTING)
        assert rel(got, want) > 1e-2, key


def test_routing_renormalises_by_default_for_gpt_oss() -> None:
    assert ROUTING.norm_topk_prob and ROUTING.scoring_func == "softmax"


def test_interleaved_split_refuses_an_odd_row_count() -> None:
    proj = Projection({"weight": torch.zeros(3, 8, dtype=torch.uint8)}, MXFP4, "odd")
    with pytest.raises(InputError, match="odd row count 3"):
        split_interleaved(proj)
