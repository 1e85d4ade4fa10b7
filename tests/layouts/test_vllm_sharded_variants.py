"""vllm-sharded beyond the defaults: FSE with two shared experts, FSE off, heavy --pad-to,
partial --layers, the verify reader, determinism, and the CLI."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from checkpoint_tool.catalog import read_tensor
from checkpoint_tool.cli.app import main
from checkpoint_tool.plan.serialize import plan_compact_json
from checkpoint_tool.targets.sharded_read import read_sharded_moe_layer

from .reference import Reassembler, load_ranks


def reassembles(cat, plan, dst, tp):  # type: ignore[no-untyped-def]
    ref = Reassembler(cat, plan, dst, tp)
    dropped = {d.name for d in plan.dropped}
    problems = {n: p for n in sorted(cat.tensors) if n not in dropped and (p := ref.check(n))}
    assert not problems, dict(list(problems.items())[:5])


def test_two_shared_experts_fill_two_slots(sharded):
    cat, plan, dst = sharded("quark-mxfp4", 2, src_opts={"n_shared": 2}, fse="on")
    assert any(plan.fse_layers.values())
    layer = min(k for k, v in plan.fse_layers.items() if v)
    ranks = load_ranks(dst, 2)
    w13 = ranks[0][f"model.layers.{layer}.mlp.experts.routed_experts.w13_weight"]
    assert w13.shape[0] == 4 + 2
    reassembles(cat, plan, dst, 2)


def test_fse_off_keeps_a_padded_shared_mlp(sharded):
    cat, plan, dst = sharded("deepseek-v3-fp8", 2, fse="off")
    assert not any(plan.fse_layers.values())
    ranks = load_ranks(dst, 2)
    key = "model.layers.1.mlp.experts._shared_experts._layer.gate_up_proj.weight"
    # shared width 128 padded to 256 so each rank holds whole 128-row blocks: 2 x 128 rows
    assert ranks[1][key].shape == (256, 256)
    assert plan.summary.padded_intermediate_size == 256
    reassembles(cat, plan, dst, 2)


def test_pad_to_leaves_whole_ranks_of_padding(sharded):
    cat, plan, dst = sharded("quark-nvfp4", 2, pad_to=256, fse="on")
    assert plan.summary.padded_intermediate_size == 512
    ranks = load_ranks(dst, 2)
    w2 = ranks[1]["model.layers.2.mlp.experts.routed_experts.w2_weight"]
    assert w2.shape == (5, 256, 128) and not w2.any()  # rank 1 is all zero columns
    reassembles(cat, plan, dst, 2)


def test_partial_layers(sharded):
    _cat, plan, dst = sharded("quark-mxfp4", 2, layers=[2])
    names = set(load_ranks(dst, 2)[0])
    assert names and all(n.startswith("model.layers.2.") for n in names)
    assert {d.rule for d in plan.dropped} == {"layers"}
    assert "model.layers.2.mlp.experts.routed_experts.w13_weight" in names


def test_reader_gives_each_experts_rank_share(sharded):
    cat, _plan, dst = sharded("quark-nvfp4", 2, fse="on")
    n_routed = cat.config["n_routed_experts"]
    for rank in range(2):
        experts = read_sharded_moe_layer(dst, 2, rank)
        assert sorted(experts) == list(range(n_routed + 1))
        for e in (0, n_routed - 1):
            base = f"model.layers.2.mlp.experts.{e}"
            gate = read_tensor(cat, f"{base}.gate_proj.weight")  # U8 [128, 128]
            down = read_tensor(cat, f"{base}.down_proj.weight_scale")  # E4M3 [256, 8]
            rows = gate.shape[0] // 2
            assert torch.equal(experts[e]["gate"]["weight"], gate[rank * rows : (rank + 1) * rows])
            cols = down.shape[1] // 2
            got = experts[e]["down"]["weight_scale"].view(torch.uint8)
            assert torch.equal(got, down[:, rank * cols : (rank + 1) * cols].view(torch.uint8))
            s2 = read_tensor(cat, f"{base}.up_proj.weight_scale_2")
            assert torch.equal(experts[e]["up"]["weight_scale_2"], s2)
        shared = read_tensor(cat, "model.layers.2.mlp.shared_experts.up_proj.weight_scale")
        rows = shared.shape[0] // 2
        got = experts[n_routed]["up"]["weight_scale"].view(torch.uint8)
        assert torch.equal(got, shared[rank * rows : (rank + 1) * rows].view(torch.uint8))


def test_plans_are_deterministic(layout_src):
    from checkpoint_tool.catalog import open_local
    from checkpoint_tool.plan.build import plan_for_catalog
    from checkpoint_tool.plan.model import PlanOptions

    src = layout_src("quark-hybrid")
    options = PlanOptions(tp=2, layout="vllm-sharded")
    a = plan_compact_json(plan_for_catalog(open_local(src), options))
    b = plan_compact_json(plan_for_catalog(open_local(src), options))
    assert a == b


def _cli(monkeypatch, capsys, *argv: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["ckpt", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    return int(exc.value.code or 0), capsys.readouterr().out


def test_cli_plan_and_convert(monkeypatch, capsys, layout_src, tmp_path):
    src = str(layout_src("modelopt-nvfp4"))
    code, out = _cli(monkeypatch, capsys, "plan", src, "--layout", "vllm-sharded", "--tp", "2",
                     "--format", "json")  # fmt: skip
    assert code == 0
    plan = json.loads(out)
    ranks = sorted({f["rank"] for f in plan["files"]})
    assert ranks == [0, 1] and plan["options"]["layout"] == "vllm-sharded"
    dst = tmp_path / "out"
    code, out = _cli(monkeypatch, capsys, "convert", src, str(dst), "--layout", "vllm-sharded",
                     "--tp", "2", "--max-shard-size", "200KB")  # fmt: skip
    assert code == 0, out
    parts = sorted(p.name for p in dst.glob("model-rank-1-part-*.safetensors"))
    assert len(parts) > 1 and parts[0] == "model-rank-1-part-0.safetensors"
    assert json.loads((dst / "config.json").read_text())["ckpt"]["layout"] == "vllm-sharded"
