"""MiniMax-M3 as vLLM 0.33 reads it (``vllm/models/minimax_m3/amd/model.py``).

* ``MiniMaxM3MoE.__init__``: routed experts ``num_local_experts`` x ``intermediate_size``,
  the shared MLP ``intermediate_size * n_shared_experts`` wide under
  ``block_sparse_moe.shared_experts``;
* ``MiniMaxM3Model.get_expert_mapping``: routed experts spelled ``w1`` (gate) / ``w3`` (up) /
  ``w2`` (down), slot ``num_local_experts`` included under FSE;
* ``MiniMaxM3Model.load_weights``: with FSE, ``.shared_experts.gate_proj.`` ->
  ``.experts.{num_local_experts}.w1.`` (up -> w3, down -> w2);
* ``_is_moe_layer``: ``moe_layer_freq[layer_id] != 0``;
* ``nvidia/mtp.py`` ``MiniMaxM3MTP._map_checkpoint_name``: MTP weights at
  ``model.mtp.layers.K`` (``language_model.`` stripped), ``num_mtp_modules`` of them, each
  built with ``force_moe=True``.
"""

from __future__ import annotations

import json

import pytest
from catalog.producer_ckpt import write_checkpoint

from checkpoint_tool.model import model_facts

from .layouts import INTER, E, minimax_m3
from .runs import ckpt, errors, policy, validate

AITER = "vllm-0.33-rocm-aiter-fse"


@pytest.mark.parametrize("wrapper", [True, False], ids=["vl", "text"])
def test_facts(wrapper):
    config, tensors = minimax_m3(wrapper=wrapper)
    facts = model_facts(config, set(tensors))
    root = "language_model.model" if wrapper else "model"
    assert facts.family == "minimax_m3"
    assert [(m.layer, m.prefix, m.is_mtp) for m in facts.moe_layers] == [
        (3, f"{root}.layers.3.block_sparse_moe", False),
        (4, f"{root}.mtp.layers.0.block_sparse_moe", True),
    ]
    layer = facts.moe_layers[0]
    assert (layer.n_routed, layer.n_shared, layer.moe_intermediate_size) == (E, 1, INTER)
    assert layer.shared_intermediate_size == INTER
    assert layer.routed_weight(2, "up") == f"{root}.layers.3.block_sparse_moe.experts.2.w3.weight"
    assert layer.shared_modules() == [
        f"{root}.layers.3.block_sparse_moe.shared_experts.{leaf}"
        for leaf in ("gate_proj", "up_proj", "down_proj")
    ]
    assert facts.width_key == "intermediate_size"


def test_inspect_fuses_every_moe_layer_without_findings(tmp_path):
    config, tensors = minimax_m3()
    root = write_checkpoint(tmp_path / "m3", tensors, config)
    report = policy(root, target=AITER)
    assert report.issues == []
    assert report.summary.fse_enabled_layers == [3, 4]


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_convert_verify_validate(tmp_path, capsys, fp8):
    """FSE output: the shared MLP lands in slot ``experts.{E}.w1/w3/w2`` (where vLLM's
    redirect puts it); FP8 block 128 at TP 2 pads ``intermediate_size`` 128 -> 256."""
    config, tensors = minimax_m3(fp8=fp8)
    src = write_checkpoint(tmp_path / "m3", tensors, config)
    assert errors(validate(src)) == []
    dst = tmp_path / "out"
    code, _, err = ckpt(capsys, "convert", str(src), str(dst), "--tp", "2", "--target", AITER)
    assert code == 0, err
    assert errors(validate(dst)) == []
    out_config = json.loads((dst / "config.json").read_text())
    assert out_config["text_config"]["intermediate_size"] == (2 * INTER if fp8 else INTER)
    index = json.loads((dst / "model.safetensors.index.json").read_text())["weight_map"]
    slot = f"language_model.model.layers.3.block_sparse_moe.experts.{E}"
    assert {f"{slot}.w1.weight", f"{slot}.w3.weight", f"{slot}.w2.weight"} <= set(index)
    assert not any(".shared_experts." in n for n in index)
    code, _, err = ckpt(capsys, "verify", "--source", str(src), str(dst))
    assert code == 0, err
