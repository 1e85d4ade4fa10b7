"""resolve_catalog: roles for every tensor; catalog_findings: one finding per thing the config
cannot explain."""

from __future__ import annotations

from typing import Any, NamedTuple

from catalog.producer_ckpt import quark_checkpoint, write_checkpoint

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.quant.configs import QuarkConfig
from checkpoint_tool.quant.findings import catalog_findings
from checkpoint_tool.quant.resolve import resolve_catalog, resolve_tensor
from checkpoint_tool.report import Issue

MX = {
    "dtype": "fp4",
    "qscheme": "per_group",
    "group_size": 32,
    "scale_format": "e8m0",
    "is_dynamic": False,
}
QC = {
    "quant_method": "quark",
    "export": {},
    "global_quant_config": {"weight": MX},
    "exclude": ["lm_head"],
}
M = "model.layers.0.mlp.down_proj"
GOOD = {f"{M}.weight": ("U8", (64, 32)), f"{M}.weight_scale": ("U8", (64, 2))}


class Resolved(NamedTuple):
    """A catalog's resolved tensors and its findings (the two steps, in order)."""

    tensors: dict[str, Any]
    issues: list[Issue]


def resolved(cat) -> Resolved:
    rc = resolve_catalog(cat)
    return Resolved(rc.tensors, catalog_findings(cat, rc))


def resolve(tmp_path, tensors, qc=QC, config_extra=None) -> Resolved:
    config = {"model_type": "deepseek_v3", "quantization_config": qc, **(config_extra or {})}
    if qc is None:
        config.pop("quantization_config")
    return resolved(open_catalog(write_checkpoint(tmp_path / "c", tensors, config)))


def rules(rc):
    return sorted((i.rule, i.tensor) for i in rc.issues)


def test_roles():
    cfg = QuarkConfig.model_validate(QC)
    roles = {
        f"{M}.weight": "weight",
        f"{M}.weight_scale": "scale",
        f"{M}.weight_scale_2": "global_scale",
        f"{M}.input_scale": "input_scale",
        f"{M}.bias": "bias",
        "model.layers.1.mlp.gate.e_score_correction_bias": "bias",
        "model.layers.0.self_attn.k_proj.k_scale": "other",
    }
    assert {n: resolve_tensor(cfg, n).role for n in roles} == roles


def test_clean_checkpoint_has_no_issues(tmp_path):
    rc = resolve(tmp_path, GOOD)
    assert rc.issues == [] and rc.tensors[f"{M}.weight_scale"].scheme.short() == "mxfp4/32"


def test_missing_scale(tmp_path):
    rc = resolve(tmp_path, {f"{M}.weight": ("U8", (64, 32))})
    assert rules(rc) == [("missing_scale", f"{M}.weight")]
    assert f"{M}.weight_scale" in rc.issues[0].message and rc.issues[0].file == "model.safetensors"


def test_experts_like_a_clean_one_are_still_checked_each(tmp_path):
    """Experts whose tensors look like a clean expert's are clean; one that differs anywhere
    (a scale missing, of another shape, or of another dtype) is found, whichever comes first."""
    e = "model.layers.3.mlp.experts.{}.down_proj"
    good = {
        **{f"{e.format(k)}.weight": ("U8", (64, 32)) for k in range(8)},
        **{f"{e.format(k)}.weight_scale": ("U8", (64, 2)) for k in range(8)},
    }
    assert resolve(tmp_path / "a", good).issues == []
    bad = {**good, f"{e.format(5)}.weight_scale": ("U8", (64, 4))}
    bad[f"{e.format(6)}.weight_scale"] = ("F32", (64, 2))
    del bad[f"{e.format(7)}.weight_scale"]
    del bad[f"{e.format(0)}.weight_scale"]
    assert rules(resolve(tmp_path / "b", bad)) == [
        ("missing_scale", f"{e.format(0)}.weight"),
        ("missing_scale", f"{e.format(7)}.weight"),
        ("scale_dtype", f"{e.format(6)}.weight_scale"),
        ("scale_shape", f"{e.format(5)}.weight_scale"),
    ]


def test_scale_of_wrong_dtype_and_shape(tmp_path):
    rc = resolve(tmp_path, {**GOOD, f"{M}.weight_scale": ("F32", (64, 4))})
    assert rules(rc) == [("scale_dtype", f"{M}.weight_scale"), ("scale_shape", f"{M}.weight_scale")]
    assert "[64, 2]" in rc.issues[1].message or "[64, 2]" in rc.issues[0].message


def test_weight_the_format_cannot_store(tmp_path):
    """A 1-D MXFP4 "weight": no scale shape can be derived; one finding names the weight."""
    rc = resolve(tmp_path, {f"{M}.weight": ("U8", (64,)), f"{M}.weight_scale": ("U8", (4,))})
    assert rules(rc) == [("weight_shape", f"{M}.weight")]
    assert "at least 2 dims" in rc.issues[0].message


def test_weight_dtype_disagrees_with_config(tmp_path):
    rc = resolve(tmp_path, {f"{M}.weight": ("BF16", (64, 64))})
    assert rules(rc) == [("weight_dtype", f"{M}.weight")]


def test_unexplained_tensors(tmp_path):
    tensors = {
        **GOOD,
        f"{M}.weight_scale_inv": ("F32", (1, 1)),  # DeepSeek spelling in a Quark checkpoint
        "model.layers.0.mlp.up_proj.weight_scale": ("U8", (64, 2)),  # scale without a weight
    }
    rc = resolve(tmp_path, tensors)
    assert rules(rc) == [
        ("unexplained_tensor", f"{M}.weight_scale_inv"),
        ("unexplained_tensor", "model.layers.0.mlp.up_proj.weight_scale"),
    ]


def test_scales_without_any_quantization_config(tmp_path):
    rc = resolve(
        tmp_path, {f"{M}.weight": ("BF16", (64, 64)), f"{M}.weight_scale": ("BF16", ())}, qc=None
    )
    assert rules(rc) == [("unexplained_tensor", f"{M}.weight_scale")]


def test_packed_shards_with_different_schemes(tmp_path):
    qc = {**QC, "exclude": ["lm_head", "model.layers.0.self_attn.q_a_proj"]}
    a, b = "model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.kv_a_proj_with_mqa"
    tensors = {
        f"{a}.weight": ("BF16", (64, 64)),
        f"{b}.weight": ("U8", (64, 32)),
        f"{b}.weight_scale": ("U8", (64, 2)),
    }
    rc = resolve(tmp_path, tensors, qc=qc)
    assert rules(rc) == [("packed_mismatch", f"{a}.weight")]  # reported on the first shard
    assert "fused_qkv_a_proj" in rc.issues[0].message


def test_unsupported_scheme_is_a_warning(tmp_path):
    qc = {
        **QC,
        "global_quant_config": {
            "weight": {"dtype": "int4", "qscheme": "per_group", "group_size": 128}
        },
    }
    rc = resolve(
        tmp_path, {f"{M}.weight": ("I32", (64, 8)), f"{M}.weight_scale": ("BF16", (64, 1))}, qc=qc
    )
    assert [(i.severity, i.rule) for i in rc.issues] == [("warning", "unsupported_scheme")]


def test_fused_experts_are_reported_once_each(tmp_path):
    rc = resolved(open_catalog(quark_checkpoint(tmp_path / "q", "nvfp4")))
    assert rules(rc) == [
        ("fused_experts_unquantized", "model.layers.1.mlp.experts.down_proj"),
        ("fused_experts_unquantized", "model.layers.1.mlp.experts.gate_up_proj"),
    ]
    assert all(i.severity == "warning" for i in rc.issues)


def test_deepseek_v4_float_linears_without_scale_are_unquantized(tmp_path):
    qc = {"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}
    tensors = {
        "layers.0.attn.compressor.wkv.weight": ("BF16", (64, 64)),
        "layers.0.attn.wo_a.weight": ("F8_E4M3", (64, 64)),
    }
    rc = resolve(
        tmp_path, tensors, qc=qc, config_extra={"model_type": "deepseek_v4", "expert_dtype": "fp4"}
    )
    assert rules(rc) == [("missing_scale", "layers.0.attn.wo_a.weight")]
    assert not rc.tensors["layers.0.attn.compressor.wkv.weight"].scheme.quantized


def test_quark_config_without_export_block(tmp_path):
    qc = {k: v for k, v in QC.items() if k != "export"}
    rc = resolve(tmp_path, GOOD, qc=qc)
    assert [(i.rule, i.file) for i in rc.issues] == [("config_incomplete", "config.json")]


def test_vllm_unquantized_helpers_are_not_linears():
    cfg = QuarkConfig.model_validate(QC)
    for name in (
        "model.layers.0.linear_attn.conv1d.weight",
        "model.layers.0.mlp.shared_expert_gate.weight",
        "model.layers.61.eh_proj.weight",
        "model.layers.0.self_attn.indexer.weights_proj.weight",
    ):
        assert not resolve_tensor(cfg, name).scheme.quantized, name


def test_deepseek_v4_engram_table_resolves_as_fp8_rows_with_e8m0_groups(synth_ckpt):
    """FORMATS.md §4: engram tables are FP8 rows with one E8M0 scale per 32 columns."""
    from checkpoint_tool.catalog import open_local
    from checkpoint_tool.quant.scheme import WeightFormat

    cat = open_local(synth_ckpt("deepseek-v4"))
    rc = resolved(cat)
    engram = [n for n in cat.tensors if ".engram.embed." in n]
    assert engram
    for name in engram:
        t = rc.tensors[name]
        assert t.scheme.format is WeightFormat.MXFP8
        assert t.scheme.group_size == 32
        assert t.role == ("scale" if name.endswith(".scale") else "weight")
    assert not [i for i in rc.issues if ".engram." in (i.tensor or "")]
