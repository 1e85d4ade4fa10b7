"""Per-layer decisions, --fse modes and the parallelism rule against layer mixes."""

from __future__ import annotations

from checkpoint_tool.policy.fse import apply_model_rules, decide_layer
from checkpoint_tool.policy.fse_gates import OK, GateResult

from .helpers import dsv3_layer

NO = GateResult(False, "quark_excludes_shared", "Quark excludes shared experts at {prefix}",
                {"prefix": "model.layers.2.mlp.shared_experts"})  # fmt: skip


def test_enabled_layer_gets_slots_after_the_routed_experts():
    d = decide_layer(dsv3_layer(1, n_shared_experts=2), gate=OK, layout=OK, mode="auto")
    assert d.enabled and d.slots == [8, 9] and d.chunk_size == 128


def test_disabled_reason_and_template():
    d = decide_layer(dsv3_layer(2), gate=NO, layout=OK, mode="auto")
    assert not d.enabled and d.source == "vllm"
    assert d.reason == "Quark excludes shared experts at model.layers.2.mlp.shared_experts"
    assert d.reason_template == "Quark excludes shared experts at model.layers.N.mlp.shared_experts"


def test_fse_off_and_no_shared_experts():
    assert decide_layer(dsv3_layer(1), gate=OK, layout=OK, mode="off").code == "fse_off"
    d = decide_layer(dsv3_layer(1, n_shared_experts=0), gate=OK, layout=OK, mode="on")
    assert d.code == "no_shared_experts" and not d.enabled


def _mixed():
    return {
        1: decide_layer(dsv3_layer(1), gate=OK, layout=OK, mode="auto"),
        2: decide_layer(dsv3_layer(2), gate=NO, layout=OK, mode="auto"),
        3: decide_layer(dsv3_layer(3), gate=OK, layout=OK, mode="auto"),
    }


def test_mixed_layers_are_fine_without_parallelism_flags():
    out, issues = apply_model_rules(_mixed(), mode="auto", ep=False, eplb=False, all2all=None)
    assert [k for k, d in out.items() if d.enabled] == [1, 3] and issues == []
    # an all2all backend other than nixl_ep changes nothing
    out, issues = apply_model_rules(_mixed(), mode="auto", ep=False, eplb=False, all2all="naive")
    assert [k for k, d in out.items() if d.enabled] == [1, 3] and issues == []


def test_ep_disables_a_mix_everywhere_with_a_warning():
    for flags in ({"ep": True, "eplb": False, "all2all": None},
                  {"ep": True, "eplb": True, "all2all": None},
                  {"ep": False, "eplb": False, "all2all": "nixl_ep"}):  # fmt: skip
        out, issues = apply_model_rules(_mixed(), mode="auto", **flags)
        assert not any(d.enabled for d in out.values())
        assert out[1].code == "parallel_mixed" and out[2].code == "quark_excludes_shared"
        assert "2 enabled and 1 disabled layers" in out[1].reason
        assert [i.severity for i in issues] == ["warning"]


def test_fse_on_is_an_error_when_mixed_under_ep_or_when_a_layer_cannot_fuse():
    _, issues = apply_model_rules(_mixed(), mode="on", ep=True, eplb=False, all2all=None)
    rules = sorted(i.rule for i in issues)
    assert rules == ["fse_mixed_under_parallelism", "fse_required"]
    assert all(i.severity == "error" for i in issues)
    _, issues = apply_model_rules(_mixed(), mode="on", ep=False, eplb=False, all2all=None)
    assert [i.rule for i in issues] == ["fse_required"]
    assert "MoE layer(s) [2]" in issues[0].message


def test_uniform_fse_under_ep_is_kept():
    all_on = {k: decide_layer(dsv3_layer(k), gate=OK, layout=OK, mode="auto") for k in (1, 2, 3)}
    out, issues = apply_model_rules(all_on, mode="on", ep=True, eplb=True, all2all="nixl_ep")
    assert all(d.enabled for d in out.values()) and issues == []
