"""The engine verdict reads the ``PolicyDecision``: its parsed config, resolved schemes, model
facts and per-layer FSE decisions; it loads and resolves nothing itself when given one.

Without a decision (ckpt cannot decide a policy) the verdict still parses the config itself:
the engine may load what ckpt refuses to plan.
"""

from __future__ import annotations

import pytest

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.errors import InputError
from checkpoint_tool.policy import decide_policy
from checkpoint_tool.policy.engine import context as engine_context
from checkpoint_tool.policy.engine.build import build_engine_report

AITER_FSE = "vllm-0.33-rocm-aiter-fse"


def _refuse(*args, **kwargs):
    raise AssertionError("the engine verdict reloaded the quantization config")


@pytest.mark.parametrize("preset", ["quark-hybrid", "deepseek-v4", "quark-nvfp4"])
def test_engine_verdict_uses_the_decision_only(synth_ckpt, monkeypatch, preset):
    cat = open_catalog(synth_ckpt(preset))
    decision = decide_policy(cat, tp=2, target=AITER_FSE)
    monkeypatch.setattr(engine_context, "load_quant_config", _refuse)
    monkeypatch.setattr(engine_context, "resolve_tensor", _refuse)
    monkeypatch.setattr(engine_context, "model_facts", _refuse)
    report = build_engine_report(cat, decision, AITER_FSE, 2)
    assert report.rules_checked and report.summary.text.startswith(AITER_FSE)


def test_decision_and_fallback_agree(synth_ckpt):
    # the same checkpoint, with and without a decision: the same findings but for the rules
    # that need the decision's FSE verdicts (the decision's schemes are those the fallback
    # resolves one tensor at a time)
    cat = open_catalog(synth_ckpt("quark-hybrid"))
    with_decision = build_engine_report(cat, decide_policy(cat, tp=2), None, 2)
    without = build_engine_report(cat, None, None, 2)
    fse_rules = {
        "fse_mixed_all_or_nothing",
        "fse_slots_unfused",
        "checkpoint_incomplete",
        "tp_fp8_block_shared_linear",
    }
    assert without.findings  # scheme-dependent (tp_mxfp4_backend_round_up)
    assert [f for f in with_decision.findings if f.rule not in fse_rules] == [
        f for f in without.findings if f.rule not in fse_rules
    ]


def test_the_decision_fse_split_reaches_the_verdict(synth_ckpt):
    # quark-hybrid on an all-or-nothing engine: layers 3, 4 fusable, 1, 2 not; with --fse off
    # in the decision nothing is fused and the mix is gone
    cat = open_catalog(synth_ckpt("quark-hybrid"))
    mixed = build_engine_report(cat, decide_policy(cat, target=AITER_FSE), AITER_FSE)
    off = build_engine_report(cat, decide_policy(cat, target=AITER_FSE, fse="off"), AITER_FSE)
    assert [f.rule for f in mixed.findings].count("fse_mixed_all_or_nothing") == 1
    assert "fse_mixed_all_or_nothing" not in [f.rule for f in off.findings]


def test_without_a_decision_the_config_error_is_kept(variant):
    def break_it(qc):
        qc["quant_method"] = "no-such-method"

    cat = open_catalog(variant("quark-mxfp4", break_it))
    with pytest.raises(InputError):
        decide_policy(cat)
    report = build_engine_report(cat, None)
    assert "config_unknown_quant_method" in [f.rule for f in report.findings]
