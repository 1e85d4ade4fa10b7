"""GLM-5-Next, AXK1, LongCat-Flash and Qwen4-exp as families.yaml rows, each case's facts
taken from vLLM 0.33's model file:

* GLM-5-Next, ``models/glm5next/common/model.py``: ``Glm5NextDecoderLayer`` is MoE when
  ``mlp_layer_types[layer_idx] == "sparse"`` (past the list: its last entry);
  ``Glm5NextMoE`` has ``n_shared_experts`` as one ``mlp.shared_experts`` MLP and fuses by
  ``resolve_layer_fused_shared_expert``; ``common/mtp.py``: ``num_nextn_predict_layers`` MTP
  layers from ``num_hidden_layers`` on.
* AXK1, ``model_executor/models/AXK1.py`` ``_get_mlp_layer_types``: ``mlp_layer_types`` when
  set, else ``i >= first_k_dense_replace and i % moe_layer_freq == 0``; ``AXK1MoE`` as
  DeepSeek's.
* LongCat-Flash, ``model_executor/models/longcat_flash.py``: ``FlashModel`` builds
  ``config.num_layers`` layers, each with one ``LongcatMoe`` (``mlp``, router
  ``mlp.router.classifier``) and no shared expert.
* Qwen4-exp, ``models/qwen4_exp/amd/model.py``: Qwen3-Next's block on every layer;
  ``amd/mtp.py``: ``getattr(config, "mtp_num_hidden_layers", 1)``.
"""

from __future__ import annotations

import json

import pytest
from catalog.producer_ckpt import write_checkpoint

from checkpoint_tool.model import model_facts

from .layouts import INTER, E, axk1, glm5_next, longcat_flash, minimax_m2, qwen4_exp
from .runs import ckpt, errors, policy, validate

AITER = "vllm-0.33-rocm-aiter-fse"

#: name -> (builder, family, MoE layers, MTP layers, shared experts, FSE layers on AITER)
CASES = {
    "glm5-next": (glm5_next, "glm5_next", [1, 2, 3, 4], [4], 1, [1, 2, 3, 4]),
    "axk1": (axk1, "axk1", [1, 2, 3], [], 1, [1, 2, 3]),
    "axk1-layer-types": (
        lambda: axk1(layer_types=True),
        "axk1",
        [2, 3],
        [],
        1,
        [2, 3],
    ),
    "longcat-flash": (longcat_flash, "longcat_flash", [0, 1], [], 0, []),
    "qwen4-exp": (qwen4_exp, "qwen3_moe", [0, 1, 2], [2], 1, [0, 1, 2]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_facts(name):
    build, family, moe, mtp, n_shared, _ = CASES[name]
    config, tensors = build()
    facts = model_facts(config, set(tensors))
    assert facts.family == family
    assert facts.moe_layer_indices == moe
    assert [m.layer for m in facts.moe_layers if m.is_mtp] == mtp
    for m in facts.moe_layers:
        assert (m.n_routed, m.n_shared, m.moe_intermediate_size) == (E, n_shared, INTER)


@pytest.mark.parametrize("name", sorted(CASES))
def test_inspect_and_convert(tmp_path, capsys, name):
    build, _, _, _, _, fused = CASES[name]
    config, tensors = build()
    src = write_checkpoint(tmp_path / "src", tensors, config)
    report = policy(src, target=AITER)
    assert report.issues == []
    assert report.summary.fse_enabled_layers == fused
    assert errors(validate(src)) == []
    dst = tmp_path / "out"
    code, _, err = ckpt(capsys, "convert", str(src), str(dst), "--tp", "2")
    assert code == 0, err
    assert errors(validate(dst)) == []


def test_longcat_zero_experts_are_not_verified_numerically(tmp_path, capsys):
    """The router scores ``n_routed_experts + zero_expert_num`` experts (``LongcatRouter``);
    ckpt's runtime has no zero (identity) experts, so the numeric check says it could not
    run instead of passing."""
    config, tensors = longcat_flash()
    src = write_checkpoint(tmp_path / "src", tensors, config)
    dst = tmp_path / "out"
    assert ckpt(capsys, "convert", str(src), str(dst), "--tp", "2")[0] == 0
    code, out, err = ckpt(capsys, "verify", "--source", str(src), str(dst))
    assert code != 0 and "not in 0..3" in out + err


def test_minimax_m25_fp8_pads_its_own_width_key(tmp_path, capsys):
    """MiniMax-M2.5 FP8 (block 128) at TP 2: 64 per rank is no whole block, so the experts
    are padded to 256 and config.json's ``intermediate_size`` (the key vLLM's
    ``MiniMaxM2MoE`` reads) says so; ``"fmt": "float8_e4m3fn"`` is no error."""
    config, tensors = minimax_m2()
    src = write_checkpoint(tmp_path / "src", tensors, config)
    assert policy(src).issues == []
    assert errors(validate(src)) == []
    dst = tmp_path / "out"
    code, _, err = ckpt(capsys, "convert", str(src), str(dst), "--tp", "2")
    assert code == 0, err
    out = json.loads((dst / "config.json").read_text())
    assert out["intermediate_size"] == 2 * INTER and "moe_intermediate_size" not in out
    assert errors(validate(dst)) == []
    code, _, err = ckpt(capsys, "verify", "--source", str(src), str(dst))
    assert code == 0, err
