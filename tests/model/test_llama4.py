"""Llama-4 (Scout / Maverick) as vLLM 0.33 reads it (``model_executor/models/llama4.py``).

* ``Llama4DecoderLayer.__init__``: MoE when ``interleave_moe_layer_step > 0`` and
  ``(layer_idx + 1) % interleave_moe_layer_step == 0``; the block is ``feed_forward``;
* ``Llama4MoE.__init__``: ``num_local_experts`` experts and one ``shared_expert``, both
  ``intermediate_size`` wide; the shared expert goes to FusedMoE as a separate module
  (``shared_experts=self.shared_expert``, no fused slots): it never fuses;
* ``Llama4Model.load_moe_expert_weights``: fused ``experts.gate_up_proj`` is
  ``[E, H, 2I]`` and ``experts.down_proj`` ``[E, INTER, H]`` (``[num_experts, hidden_in,
  hidden_out]``: transposed, then gate_up chunked in two along the intermediate dim).
"""

from __future__ import annotations

import json
import struct

import pytest
from catalog.producer_ckpt import write_checkpoint

from checkpoint_tool.model import model_facts

from .layouts import INTER, E, H, llama4
from .runs import ckpt, errors, policy, validate


@pytest.mark.parametrize(
    ("step", "moe"), [(1, [0, 1, 2, 3]), (2, [1, 3])], ids=["scout", "maverick"]
)
def test_facts(step, moe):
    config, tensors = llama4(layers=4, step=step)
    facts = model_facts(config, set(tensors))
    assert facts.family == "llama4"
    assert facts.moe_layer_indices == moe
    layer = facts.moe_layers[0]
    assert (layer.n_routed, layer.n_shared, layer.moe_intermediate_size) == (E, 1, INTER)
    assert layer.shared_intermediate_size == INTER
    assert layer.naming.routed_layout == "fused_3d"
    assert layer.naming.inter_axis("gate", three_d=True) == -1
    assert layer.naming.inter_axis("down", three_d=True) == -2
    assert layer.shared_modules()[0].endswith(".feed_forward.shared_expert.gate_proj")


def test_inspect_reads_the_width_and_never_fuses(tmp_path):
    config, tensors = llama4()
    root = write_checkpoint(tmp_path / "l4", tensors, config)
    report = policy(root, target="vllm-0.33-rocm-aiter-fse")
    assert [i.message for i in report.issues if i.severity == "error"] == []
    assert report.summary.fse_enabled_layers == []
    m = report.moe_layers[0]
    assert m.routed.width == INTER and m.fse.code == "model_no_fse"


def _shapes(root) -> dict[str, list[int]]:
    path = next(root.glob("*.safetensors"))
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


@pytest.mark.parametrize(
    ("pad", "width"), [([], INTER), (["--pad-to", "96"], 192)], ids=["as-is", "padded"]
)
def test_convert_keeps_the_fused_order(tmp_path, capsys, pad, width):
    """The output keeps vLLM's fused [in, out] tensors (padded in place when asked), passes
    validate and verifies against the source."""
    config, tensors = llama4()
    src = write_checkpoint(tmp_path / "l4", tensors, config)
    assert errors(validate(src)) == []
    dst = tmp_path / "out"
    code, _, err = ckpt(capsys, "convert", str(src), str(dst), "--tp", "2", *pad)
    assert code == 0, err
    shapes = _shapes(dst)
    ff = "language_model.model.layers.0.feed_forward"
    assert shapes[f"{ff}.experts.gate_up_proj"] == [E, H, 2 * width]
    assert shapes[f"{ff}.experts.down_proj"] == [E, width, H]
    out_config = json.loads((dst / "config.json").read_text())
    assert out_config["text_config"]["intermediate_size"] == width
    assert errors(validate(dst)) == []
    code, _, err = ckpt(capsys, "verify", "--source", str(src), str(dst))
    assert code == 0, err


def test_validate_fails_experts_read_the_wrong_way_round(tmp_path):
    """``[E, 2I, 2H]``: hidden_size is not where vLLM's loader reads it (dim 1)."""
    config, tensors = llama4()
    ff = "language_model.model.layers.0.feed_forward"
    tensors[f"{ff}.experts.gate_up_proj"] = ("BF16", (E, 2 * INTER, 2 * H))
    root = write_checkpoint(tmp_path / "l4", tensors, config)
    assert ("expert_shapes", f"{ff}.experts.gate_up_proj") in errors(validate(root))


def test_fused_experts_are_no_finding_where_vllm_reads_them_fused(tmp_path):
    """``load_moe_expert_weights`` reads the 3-D tensors as they are: no
    ``fused_experts_unquantized`` warning in inspect or validate (a family whose loader wants
    per-expert tensors still gets it: tests/validate/test_producer_exports.py)."""
    config, tensors = llama4()
    root = write_checkpoint(tmp_path / "l4", tensors, config)
    report = policy(root)
    assert [i.rule for i in report.issues if i.rule == "fused_experts_unquantized"] == []
    assert "fused_experts_unquantized" not in {f.rule for f in validate(root).findings()}
