"""``ckpt verify`` through the real entry point: human and JSON reports, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from checkpoint_tool.cli.app import main


@pytest.fixture(scope="module")
def pair(synth_ckpt, tmp_path_factory) -> tuple[Path, Path]:
    """quark-mxfp4 converted at TP 2 (read-only: copy before corrupting)."""
    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.execute import execute_plan, writer
    from checkpoint_tool.plan.build import plan_for_catalog
    from checkpoint_tool.plan.model import PlanOptions

    src = synth_ckpt("quark-mxfp4")
    dst = tmp_path_factory.mktemp("verify-cli") / "out"
    catalog = open_catalog(src, headers_only=False)
    durable, writer.DURABLE = writer.DURABLE, False
    try:
        execute_plan(plan_for_catalog(catalog, PlanOptions(tp=2, target="vllm-per-layer-fse")), catalog, dst, progress=False)
    finally:
        writer.DURABLE = durable
    return src, dst


def _patch(dst: Path, name: str, offset: int, count: int, delta: int) -> None:
    """Add ``delta`` (mod 256) to ``count`` bytes of tensor ``name`` in an hf-layout output."""
    rel = json.loads((dst / "model.safetensors.index.json").read_text())["weight_map"][name]
    data = bytearray((dst / rel).read_bytes())
    n = int.from_bytes(data[:8], "little")
    begin = 8 + n + json.loads(data[8 : 8 + n])[name]["data_offsets"][0] + offset
    for i in range(begin, begin + count):
        data[i] = (data[i] + delta) % 256
    (dst / rel).write_bytes(bytes(data))


def _run(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["ckpt", "verify", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_human_report_passes(monkeypatch, capsys, pair) -> None:
    src, dst = pair
    code, out, err = _run(monkeypatch, capsys, str(dst), "--source", str(src), "--backend", "torch")
    assert code == 0, err
    assert "lossless  passed" in out and "numeric   passed" in out and "PASSED" in out
    assert "TP 2" in out and "fused shared" in out


def test_json_report_of_a_corrupted_expert(monkeypatch, capsys, pair, tmp_path) -> None:
    src, dst = pair
    bad = tmp_path / "bad"
    shutil.copytree(dst, bad)
    name = "model.layers.1.mlp.experts.4.gate_proj.weight"
    _patch(bad, name, offset=0, count=128, delta=0x55)
    code, out, _ = _run(monkeypatch, capsys, str(bad), "-s", str(src), "--backend", "torch",
                        "--tokens", "32", "--format", "json")  # fmt: skip
    assert code == 1
    report = json.loads(out)
    assert report["passed"] is False
    assert [m["tensor"] for m in report["lossless"]["mismatches"]] == [name]
    assert report["numeric"]["status"] == "failed"
    assert (
        report["numeric"]["layers"][0]["rel_error"]
        > report["numeric"]["layers"][0]["rel_tolerance"]
    )


def test_human_report_lists_mismatches(monkeypatch, capsys, pair, tmp_path) -> None:
    src, dst = pair
    bad = tmp_path / "bad"
    shutil.copytree(dst, bad)
    _patch(bad, "model.layers.2.mlp.experts.0.up_proj.weight_scale", 0, 1, 1)
    code, out, _ = _run(monkeypatch, capsys, str(bad), "-s", str(src), "--no-numeric")
    assert code == 1
    assert "experts.0.up_proj.weight_scale" in out and "bytes_differ" in out and "FAILED" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--no-lossless", "--no-numeric"], "nothing to check"),
        (["--layers", "x"], "--layers"),
        (["--layers", "0", "--backend", "torch", "--no-lossless"], "not MoE layers"),
    ],
)
def test_usage_errors_exit_2(monkeypatch, capsys, pair, args, message) -> None:
    src, dst = pair
    code, _, err = _run(monkeypatch, capsys, str(dst), "-s", str(src), *args)
    assert code == 2 and message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_unreadable_inputs_exit_2(monkeypatch, capsys, pair, tmp_path) -> None:
    src, dst = pair
    code, _, err = _run(monkeypatch, capsys, str(dst), "-s", str(tmp_path / "nope"))
    assert code == 2 and "nope" in err
    bare = tmp_path / "bare"
    shutil.copytree(dst, bare)
    (bare / "ckpt-manifest.json").unlink()
    code, _, err = _run(monkeypatch, capsys, str(bare), "-s", str(src))
    assert code == 2 and "--no-lossless" in err and "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_gpu_exit_2(monkeypatch, capsys, pair) -> None:
    src, dst = pair
    code, _, err = _run(monkeypatch, capsys, str(dst), "-s", str(src), "--device", "cuda",
                        "--no-lossless")  # fmt: skip
    assert code == 2 and "no CUDA device" in err


def test_help_has_examples(monkeypatch, capsys) -> None:
    code, out, _ = _run(monkeypatch, capsys, "--help")
    assert code == 0
    assert "ckpt verify /out/model --source" in out and "--no-lossless" in out


def test_skipped_layer_exits_1_unless_allowed(monkeypatch, capsys, pair, tmp_path) -> None:
    """A source routing the runtime cannot run: the numeric check did not run, so it is not a
    pass (exit 1, the layer named); --allow-skipped accepts it (exit 0, still listed)."""
    src, dst = pair
    odd = tmp_path / "src"
    shutil.copytree(src, odd)
    cfg = json.loads((odd / "config.json").read_text())
    cfg["scoring_func"] = "sqrtrelu"
    (odd / "config.json").write_text(json.dumps(cfg))
    args = (str(dst), "-s", str(odd), "--no-lossless", "--backend", "torch")
    code, out, _ = _run(monkeypatch, capsys, *args)
    assert code == 1 and "FAILED" in out
    assert "did not run 1" in out and "scoring_func 'sqrtrelu'" in out and "--allow-skipped" in out
    code, out, _ = _run(monkeypatch, capsys, *args, "--allow-skipped", "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["passed"] is True
    assert report["numeric"]["skipped_layers"] == [1] and report["numeric"]["ran_layers"] == []


def test_backend_auto_is_the_default_and_the_report_names_the_one_that_ran(
    monkeypatch, capsys, pair
) -> None:
    """Without triton installed (a plain `pip install`), the default runs torch and says so."""
    import importlib.util

    from checkpoint_tool.cli.verify import pick_backend

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "triton" else find_spec(name, *a)
    )
    assert pick_backend("auto") == "torch" and pick_backend("triton") == "triton"
    src, dst = pair
    code, out, err = _run(monkeypatch, capsys, str(dst), "-s", str(src), "--no-lossless", "-f", "json")
    assert code == 0, err
    assert json.loads(out)["numeric"]["backend"] == "torch"
    code, out, err = _run(monkeypatch, capsys, str(dst), "-s", str(src), "--no-lossless")
    assert code == 0, err
    assert "torch on cpu" in out
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert pick_backend("auto") == "triton"
