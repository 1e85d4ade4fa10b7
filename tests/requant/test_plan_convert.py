"""``plan`` / ``convert --requantize-shared mxfp4`` on a Quark hybrid: the plan, the bytes, verify."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.catalog.reader import read_tensor
from checkpoint_tool.quant.codecs import codec_for_format
from checkpoint_tool.verify.requant import codec_mxfp4
from tests.main_run import run_main
from tests.requant.conftest import FSE_TARGET

SHARED = "model.layers.{n}.mlp.shared_experts.{p}_proj"


def _plan(monkeypatch, capsys, src: Path, *extra: str) -> dict:  # type: ignore[no-untyped-def]
    code, out, err = run_main(monkeypatch, capsys, "plan", str(src), "--format", "json", *extra)
    assert code == 0, err
    return json.loads(out)


def _tensors(doc: dict) -> dict[str, dict]:
    return {t["name"]: t for f in doc["files"] for t in f["tensors"]}


def test_plain_plan_has_no_requantization(monkeypatch, capsys, hybrid: Path) -> None:  # type: ignore[no-untyped-def]
    doc = _plan(monkeypatch, capsys, hybrid, "--target", FSE_TARGET)
    pieces = [p for t in _tensors(doc).values() for p in t["pieces"]]
    assert not any("requant" in p or "@" in p["source"] for p in pieces)
    assert "requantized_shared" not in doc["config"]["ckpt"]
    # all-or-nothing per model: layer 1 cannot fuse, so no main layer does; layer 4 is the MTP
    # drafter, which vLLM decides on its own (DeepSeekMTP.__init__ checks its layers apart)
    assert doc["fse_layers"] == {"1": False, "2": False, "3": False, "4": True}


def test_plan_requantizes_and_fuses(monkeypatch, capsys, hybrid: Path) -> None:  # type: ignore[no-untyped-def]
    doc = _plan(monkeypatch, capsys, hybrid, "--target", FSE_TARGET, "--requantize-shared", "mxfp4")
    assert doc["fse_layers"] == {"1": True, "2": True, "3": True, "4": True}
    tensors = _tensors(doc)
    slot = tensors["model.layers.1.mlp.experts.8.down_proj.weight"]
    assert slot["dtype"] == "U8"
    assert slot["pieces"] == [
        {"source": SHARED.format(n=1, p="down") + ".weight", "requant": "mxfp4", "slices": [],
         "pads": []}
    ]  # fmt: skip
    assert slot["ops"][0] == "requantize mxfp4 <- unquantized (Quark 0.13 rounding)"
    scale = tensors["model.layers.2.mlp.experts.8.gate_proj.weight_scale"]
    assert scale["pieces"][0]["source"] == SHARED.format(n=2, p="gate") + ".weight_scale"
    assert scale["pieces"][0]["requant"] == "mxfp4"
    assert scale["ops"][0].startswith("requantize mxfp4 <- fp8_block")
    # layers 3, 4 were MXFP4: plain byte copies of their own tensors
    l3 = tensors["model.layers.3.mlp.experts.8.down_proj.weight"]
    assert l3["pieces"][0]["source"] == SHARED.format(n=3, p="down") + ".weight"
    qc = doc["config"]["quantization_config"]
    assert not any("shared_experts" in e or "experts.8" in e for e in qc["exclude"])
    assert not any("experts.8" in k or "shared" in k for k in qc["layer_quant_config"])
    rec = doc["config"]["ckpt"]["requantized_shared"]
    assert rec["layers"] == [1, 2] and rec["requested"] == [1, 2, 3, 4]
    assert rec["modules"][SHARED.format(n=2, p="up")]["source"] == "fp8_block"
    assert set(rec["errors"]) == {"1", "2", "3", "4"}
    assert rec["errors"]["3"]["weight_rel_error"] == 0.0  # MXFP4 requantized is itself
    assert 0.0 < rec["errors"]["1"]["moe_rel_error"] < 1.0
    assert any("layer 3: shared expert is already MXFP4" in n for n in doc["notes"])


def test_without_a_fusing_target_the_shared_expert_stays_shared_as_mxfp4(
    monkeypatch, capsys, hybrid: Path
) -> None:  # type: ignore[no-untyped-def]
    doc = _plan(
        monkeypatch, capsys, hybrid, "--requantize-shared", "mxfp4", "--requantize-layers", "1"
    )
    assert not any(doc["fse_layers"].values())
    t = _tensors(doc)[SHARED.format(n=1, p="up") + ".weight"]
    assert t["dtype"] == "U8" and t["pieces"][0]["requant"] == "mxfp4"
    assert _tensors(doc)[SHARED.format(n=2, p="up") + ".weight"]["dtype"] == "F8_E4M3"
    qc = doc["config"]["quantization_config"]
    assert SHARED.format(n=2, p="up") in qc["layer_quant_config"]  # layer 2 untouched


def _source_weight(src: Path, module: str) -> torch.Tensor:
    cat = open_catalog(src, headers_only=False)
    w = read_tensor(cat, f"{module}.weight")
    if w.dtype == torch.bfloat16:
        return w.float()
    scale = read_tensor(cat, f"{module}.weight_scale")
    return codec_for_format("fp8_block", block=(128, 128)).dequantize({"weight": w, "scale": scale})


def test_converted_bytes_are_the_independent_quantizers(hybrid: Path, converted: Path) -> None:
    out = {}
    for f in converted.glob("*.safetensors"):
        out.update(load_file(str(f)))
    for n in (1, 2):
        for p in ("gate", "up", "down"):
            w, s = codec_mxfp4(_source_weight(hybrid, SHARED.format(n=n, p=p)))
            got = f"model.layers.{n}.mlp.experts.8.{p}_proj"
            assert torch.equal(out[f"{got}.weight"], w), got
            assert torch.equal(out[f"{got}.weight_scale"], s), got
    assert not any("shared_experts" in k for k in out)  # every layer fused


def test_convert_is_deterministic(hybrid: Path, converted: Path, tmp_path: Path) -> None:
    from checkpoint_tool.cli.session import open_plan
    from checkpoint_tool.execute import execute_plan
    from checkpoint_tool.plan.model import PlanOptions
    from checkpoint_tool.requant.select import RequantRequest

    catalog, plan = open_plan(
        str(hybrid),
        PlanOptions(target=FSE_TARGET),
        recipe=None,
        headers_only=False,
        requant=RequantRequest.parse("mxfp4", None, None),
    )
    execute_plan(plan, catalog, tmp_path / "again", progress=False)
    for name in ("ckpt-manifest.json", "config.json"):
        assert (tmp_path / "again" / name).read_bytes() == (converted / name).read_bytes()


def test_verify_passes_and_catches_a_changed_byte(
    hybrid: Path, converted: Path, tmp_path: Path
) -> None:
    from checkpoint_tool.verify.run import VerifyOptions, verify_checkpoint

    report = verify_checkpoint(converted, str(hybrid), VerifyOptions(layers=[1, 2]))
    assert report.passed, report.model_dump_json()
    assert report.lossless.plan_matches_manifest
    assert any("independent MXFP4 quantizer" in n for n in report.notes)
    bad = tmp_path / "bad"
    shutil.copytree(converted, bad)
    shard = next(bad.glob("*.safetensors"))
    from checkpoint_tool.catalog import open_catalog as oc

    e = oc(bad).tensors["model.layers.1.mlp.experts.8.down_proj.weight"]
    data = bytearray(shard.read_bytes())
    data[e.begin + 5] ^= 0x11
    shard.write_bytes(bytes(data))
    report = verify_checkpoint(bad, str(hybrid), VerifyOptions(numeric=False))
    assert not report.passed
    assert any(
        m.tensor == "model.layers.1.mlp.experts.8.down_proj.weight"
        for m in report.lossless.mismatches
    )


@pytest.mark.parametrize("layout", ["vllm-sharded"])
def test_tp2_sharded_layout_slices_requantized_tensors(
    monkeypatch, capsys, hybrid: Path, layout: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    dst = tmp_path / "tp2"
    code, _, err = run_main(
        monkeypatch, capsys, "convert", str(hybrid), str(dst), "--tp", "2", "--layout", layout,
        "--requantize-shared", "mxfp4", "--requantize-layers", "1", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    from checkpoint_tool.verify.run import VerifyOptions, verify_checkpoint

    report = verify_checkpoint(dst, str(hybrid), VerifyOptions(numeric=False))
    assert report.passed, report.model_dump_json()


def test_each_requantized_module_is_quantized_once(
    monkeypatch, capsys, hybrid: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """TP 2 slices and FSE slots put one module's bytes in several output tensors (weight and
    scale, one file per rank, written one after the other here): the run quantizes each module
    once, not once per output tensor or per rank file."""
    import checkpoint_tool.quant.requant.mxfp4 as mxfp4

    calls: list[str] = []
    real = mxfp4.quantize_mxfp4

    def counting(w, name=""):  # type: ignore[no-untyped-def]
        calls.append(name)
        return real(w, name=name)

    monkeypatch.setattr(mxfp4, "quantize_mxfp4", counting)
    dst = tmp_path / "tp2-fse"
    args = ("--tp", "2", "--target", FSE_TARGET, "--requantize-shared", "mxfp4",
            "--requantize-layers", "all")  # fmt: skip
    code, _, err = run_main(
        monkeypatch, capsys, "convert", str(hybrid), str(dst), *args, "--layout",
        "vllm-sharded", "--workers", "1", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    quantized = [n for n in calls if n.endswith(".weight")]  # the error preview names modules
    doc = _plan(monkeypatch, capsys, hybrid, *args)
    sources = {
        p["source"].rsplit(".", 1)[0] + ".weight"
        for t in _tensors(doc).values() for p in t["pieces"]
        if p.get("requant") == "mxfp4"
    }  # fmt: skip
    assert len(sources) >= 3  # the three projections of at least one layer
    assert sorted(quantized) == sorted(sources)
