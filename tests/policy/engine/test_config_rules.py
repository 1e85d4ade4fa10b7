"""Config-shape rules: positive (edited config.json) and negative (the preset as written)."""

from __future__ import annotations

import pytest

from .helpers import by_rule, engine

CONFIG_RULES = {
    "config_unknown_quant_method",
    "quark_export_missing",
    "quark_kv_cache_group_not_list",
    "quark_kv_cache_group_unmatched",
    "quark_pack_method_missing",
    "quark_layer_type_config_not_dict",
    "quark_exclude_not_list",
    "quark_exclude_string",
}


def test_presets_have_no_config_shape_findings(variant):
    for preset in ("quark-mxfp4", "quark-hybrid", "deepseek-v3-fp8"):
        assert not CONFIG_RULES & by_rule(engine(variant(preset))).keys(), preset


def _set(key, value):
    def edit(qc):
        if value is _DELETE:
            del qc[key]
        else:
            qc[key] = value

    return edit


def _set_export(key, value):
    def edit(qc):
        if value is _DELETE:
            del qc["export"][key]
        else:
            qc["export"][key] = value

    return edit


_DELETE = object()


@pytest.mark.parametrize(
    ("edit", "rule", "severity", "upstream"),
    [
        (
            _set("quant_method", "superquant"),
            "config_unknown_quant_method",
            "error",
            "Unknown quantization method: superquant. Must be one of",
        ),
        (
            _set("export", _DELETE),
            "quark_export_missing",
            "error",
            "The export key should be included in the configurations of Quark quantized model",
        ),
        (
            _set_export("kv_cache_group", None),
            "quark_kv_cache_group_not_list",
            "error",
            "object of type 'NoneType' has no len()",
        ),
        (
            _set_export("kv_cache_group", ["*k_proj", "*v_proj"]),
            "quark_kv_cache_group_unmatched",
            "error",
            "The Quark quantized model has the kv_cache_group parameter setting",
        ),
        (_set_export("pack_method", _DELETE), "quark_pack_method_missing", "warning", None),
        (
            _set("layer_type_quant_config", _DELETE),
            "quark_layer_type_config_not_dict",
            "error",
            "'NoneType' object has no attribute 'get'",
        ),
        (
            _set("exclude", None),
            "quark_exclude_not_list",
            "error",
            "'NoneType' object is not iterable",
        ),
        (_set("exclude", "lm_head"), "quark_exclude_string", "warning", None),
    ],
)
def test_config_shape_rule_fires(variant, edit, rule, severity, upstream):
    report = engine(variant("quark-mxfp4", edit))
    found = by_rule(report)
    assert rule in found, [f.rule for f in report.findings]
    f = found[rule][0]
    assert f.severity == severity
    if upstream is None:
        assert f.upstream is None
    else:
        assert f.upstream.startswith(upstream)
    assert f.source.startswith("vllm/")
    assert report.summary.will_load == (severity != "error" and not report.has_errors)


def test_kv_cache_group_with_matching_key_is_accepted(variant):
    def edit(qc):
        qc["export"]["kv_cache_group"] = ["*k_proj", "*v_proj"]
        qc["layer_quant_config"]["*k_proj"] = dict(qc["global_quant_config"])

    assert "quark_kv_cache_group_unmatched" not in by_rule(engine(variant("quark-mxfp4", edit)))


def test_known_method_of_another_producer_is_not_unknown(variant):
    # DeepSeek's native fp8 config: quant_method "fp8" is a vLLM method
    assert "config_unknown_quant_method" not in by_rule(engine(variant("deepseek-v3-fp8")))


def test_block_fp8_with_static_activations_is_refused(variant):
    found = by_rule(engine(variant("deepseek-v3-fp8", _set("activation_scheme", "static"))))
    [f] = found["fp8_block_static_activation"]
    assert f.upstream == (  # Fp8Config.__init__, quantization/fp8.py
        "The block-wise quantization only supports dynamic activation scheme for now, but got "
        "static activation scheme."
    )
    assert "fp8_block_static_activation" not in by_rule(engine(variant("deepseek-v3-fp8")))


def test_modelopt_float_lm_head_must_be_excluded(variant):
    import json

    path = variant("modelopt-nvfp4", copy=("hf_quant_config.json",))
    assert "modelopt_lm_head_quantized" not in by_rule(engine(path))  # the preset excludes it
    doc = json.loads((path / "hf_quant_config.json").read_text())
    doc["quantization"]["exclude_modules"] = [
        e for e in doc["quantization"]["exclude_modules"] if "lm_head" not in e
    ]
    (path / "hf_quant_config.json").write_text(json.dumps(doc))
    [f] = by_rule(engine(path))["modelopt_lm_head_quantized"]
    assert f.severity == "error" and f.tensors == ["lm_head.weight"]
