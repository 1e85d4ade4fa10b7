"""FSE rules: mixed per-layer FSE on an all-or-nothing target, and on a per-layer target
with EP / EPLB / nixl_ep (a target that exists only in the test's own rule table)."""

from __future__ import annotations

from checkpoint_tool.policy.engine.model import load_rule_table, table_from_dict

from .helpers import by_rule, engine


def _per_layer_table():
    base = load_rule_table().model_dump()
    data = {
        "default_target": "vllm-0.34",
        "targets": {
            "vllm-0.34": {
                **{k: v for k, v in base["targets"]["vllm-0.33"].items() if k != "name"},
                "version": "0.34.0",
                "fse": "per_layer",
            }
        },
        "rules": base["rules"],
    }
    return table_from_dict(data)


AITER_FSE = "vllm-0.33-rocm-aiter-fse"


def test_mixed_fse_refused_all_or_nothing(variant):
    # quark-hybrid: layers 1, 2 cannot fuse (excluded / different shared specs), 3 and the MTP
    # layer 4 can. vLLM decides per model (DeepseekV2Model.__init__ on layers 1-3,
    # DeepSeekMTP.__init__ on layer 4), so the main model is refused for 1 enabled, 2 disabled
    [f] = by_rule(engine(variant("quark-hybrid"), target=AITER_FSE))["fse_mixed_all_or_nothing"]
    assert f.upstream == (  # vllm/model_executor/layers/fused_moe/utils.py (0.32 and 0.33)
        "Fused shared experts must be enabled for all MoE layers; found 1 enabled and 2 "
        "disabled layers. Per-layer fused shared experts is not yet supported. Please open "
        "an issue."
    )
    assert f.details == {"enabled": [3], "disabled": [1, 2]}


def test_stock_engine_fuses_nothing_so_no_mix(variant):
    # the stock target never enables FSE: the same checkpoint loads there
    for target in ("vllm-0.33", "vllm-0.32"):
        assert "fse_mixed_all_or_nothing" not in by_rule(engine(variant("quark-hybrid"), target=target))


def test_uniform_fse_accepted(variant):
    found = by_rule(engine(variant("quark-mxfp4"), target=AITER_FSE))
    assert "fse_mixed_all_or_nothing" not in found


def test_per_layer_target(variant):
    table = _per_layer_table()
    path = variant("quark-hybrid")
    plain = by_rule(engine(path, table=table))
    assert "fse_mixed_all_or_nothing" not in plain  # version range ends before 0.34
    assert "fse_mixed_under_parallelism" not in plain
    [f] = by_rule(engine(path, table=table, ep=True, eplb=True))["fse_mixed_under_parallelism"]
    assert "--ep, --eplb" in f.message
    [g] = by_rule(engine(path, table=table, all2all="nixl_ep"))["fse_mixed_under_parallelism"]
    assert "--all2all nixl_ep" in g.message


def test_online_redirection_of_0d_shared_scales_is_refused(synth_ckpt, tmp_path):
    # Quark NVFP4 shared experts carry 0-d weight_scale_2 / input_scale_2: vLLM's online FSE
    # redirection (deepseek_v2.py load_weights) indexes loaded_weight.shape[split_dim] and
    # raises IndexError; the loader judge (tests/vllm) saw that crash on this preset
    src = synth_ckpt("quark-nvfp4")
    [f] = by_rule(engine(src, target=AITER_FSE))["fse_redirect_scalar"]
    assert f.severity == "error"
    assert f.layers and all(".shared_experts." in t for t in f.tensors)
    from safetensors import safe_open

    scalars = set()
    for shard in sorted(src.glob("*.safetensors")):
        with safe_open(shard, "pt") as fh:
            scalars |= {
                n for n in fh.keys() if ".shared_experts." in n and not fh.get_slice(n).get_shape()
            }
    assert set(f.tensors) == scalars  # every 0-d shared-expert tensor, nothing else
    # the same layers without the fusing target: nothing is redirected online
    assert "fse_redirect_scalar" not in by_rule(engine(src))
    # ckpt's conversion for that target writes the shared experts as routed slots already
    from typer.testing import CliRunner

    from checkpoint_tool.cli.app import app

    dst = tmp_path / "dst"
    r = CliRunner().invoke(
        app, ["convert", str(src), str(dst), "--target", AITER_FSE, "--no-fsync", "--no-progress"]
    )
    assert r.exit_code == 0, r.output
    assert "fse_redirect_scalar" not in by_rule(engine(dst, target=AITER_FSE))
