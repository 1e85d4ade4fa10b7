"""MTP layers as vLLM reads them: a count vLLM defaults, padding alike with the main layers,
and validate failing outputs whose experts contradict their own config.json.

Each expectation cites vLLM 0.33's source:

* ``model_executor/models/qwen3_next_mtp.py`` ``Qwen3NextMultiTokenPredictor.__init__``:
  ``self.num_mtp_layers = getattr(config, "num_nextn_predict_layers", 1)`` (Qwen3-Next-80B-A3B's
  config.json has no such key and ships ``mtp.layers.0``); ``Qwen3NextMTP.load_weights``
  renames ``mtp.`` to ``model.`` and builds each MTP layer with ``Qwen3NextDecoderLayer``
  from the same ``vllm_config``, so its experts are ``moe_intermediate_size`` wide.
* ``model_executor/models/qwen3_5_mtp.py``: ``getattr(config, "mtp_num_hidden_layers", 1)``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from catalog.producer_ckpt import write_checkpoint

from checkpoint_tool.model import model_facts

from .layouts import qwen3_next
from .runs import ckpt, errors, plan_json, planned_shapes, policy, validate


def _write(tmp_path: Path, name: str, config: dict, tensors: dict) -> Path:
    return write_checkpoint(tmp_path / name, tensors, config)


def test_mtp_without_count_key_is_read_where_vllm_defaults_it():
    config, tensors = qwen3_next()
    assert "num_nextn_predict_layers" not in config
    facts = model_facts(config, set(tensors))
    mtp = [m for m in facts.moe_layers if m.is_mtp]
    assert [(m.layer, m.prefix) for m in mtp] == [(2, "mtp.layers.0.mlp")]
    assert facts.num_mtp_layers == 1
    assert mtp[0].n_shared == 1 and mtp[0].has_shared_expert_gate


def test_defaulted_mtp_without_tensors_is_silently_absent():
    config, tensors = qwen3_next(mtp=False)
    facts = model_facts(config, set(tensors))
    assert [m.layer for m in facts.moe_layers] == [0, 1]
    assert facts.num_mtp_layers == 0 and facts.notes == []


def test_explicit_zero_count_wins_over_the_default():
    config, tensors = qwen3_next()
    facts = model_facts({**config, "num_nextn_predict_layers": 0}, set(tensors))
    assert not any(m.is_mtp for m in facts.moe_layers)


def test_qwen3_moe_has_no_defaulted_drafter():
    """Qwen3-MoE has no MTP drafter in vLLM (no qwen3_moe_mtp model): no default count."""
    config, tensors = qwen3_next()
    config = {**config, "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"]}
    facts = model_facts(config, set(tensors))
    assert not any(m.is_mtp for m in facts.moe_layers)


def test_inspect_reads_the_mtp_layer_without_errors(tmp_path):
    root = _write(tmp_path, "qn", *qwen3_next())
    report = policy(root)
    assert not report.has_errors, [i.message for i in report.issues]
    assert [m.layer for m in report.moe_layers if m.is_mtp] == [2]


def test_mtp_experts_are_padded_with_the_main_layers(tmp_path, capsys):
    """FP8 block 128 with I = 128 at TP 2: 64 per rank is no whole block, so every MoE layer
    is padded to 256, the MTP layer too (it is built from the same config.json)."""
    root = _write(tmp_path, "qn", *qwen3_next(fp8=True))
    shapes = planned_shapes(plan_json(capsys, root, "--tp", "2"))
    for prefix in ("model.layers.0.mlp", "model.layers.1.mlp", "mtp.layers.0.mlp"):
        for leaf in ("experts.3.gate_proj.weight", "shared_expert.down_proj.weight"):
            ops = shapes[f"{prefix}.{leaf}"][1]
            assert any("pad intermediate 128 -> 256" in op for op in ops), (prefix, leaf, ops)


def test_converted_output_with_mtp_validates(tmp_path, capsys):
    src = _write(tmp_path, "qn", *qwen3_next(fp8=True))
    code, _, err = ckpt(capsys, "convert", str(src), str(tmp_path / "out"), "--tp", "2")
    assert code == 0, err
    assert errors(validate(tmp_path / "out")) == []


@pytest.mark.parametrize(
    ("sizes", "bad"),
    [
        ({"mtp_moe_i": 128}, "mtp.layers.0.mlp.experts.0.gate_proj.weight"),
        ({"mtp_shared_i": 128}, "mtp.layers.0.mlp.shared_expert.down_proj.weight"),
        ({"shared_i": 128}, "model.layers.1.mlp.shared_expert.gate_proj.weight"),
    ],
    ids=["mtp-routed", "mtp-shared", "main-shared"],
)
def test_validate_fails_experts_that_contradict_config(tmp_path, sizes, bad):
    """config.json says 256 (a padded output); a layer's experts stayed 128 wide."""
    root = _write(tmp_path, "bad", *qwen3_next(fp8=True, moe_i=256, **sizes))
    found = errors(validate(root))
    assert ("expert_shapes", bad) in found, found
    assert {rule for rule, _ in found} == {"expert_shapes"}


def test_validate_passes_consistent_widths(tmp_path):
    root = _write(tmp_path, "ok", *qwen3_next(fp8=True, moe_i=256))
    assert errors(validate(root)) == []
