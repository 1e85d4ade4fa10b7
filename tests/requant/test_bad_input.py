"""Bad requantization requests: one line, exit 2, nothing written; the no-op is a note."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from tests.main_run import run_main


def _convert(monkeypatch, capsys, src: Path, dst: Path, *extra: str):  # type: ignore[no-untyped-def]
    return run_main(monkeypatch, capsys, "convert", str(src), str(dst), "--no-progress", *extra)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--requantize-shared", "nvfp4"], "unknown scheme"),
        (["--requantize-shared", "mxfp4", "--requantize-layers", "99"], "layer 99 is not an MoE"),
        (["--requantize-shared", "mxfp4", "--requantize-layers", "0"], "layer 0 is not an MoE"),
        (["--requantize-shared", "mxfp4", "--requantize-layers", "x"], "write all, auto"),
        (["--requantize-layers", "1"], "need --requantize-shared"),
        (["--requantize-shared", "mxfp4", "--requantize-layers", "auto"], "needs --max-error"),
        (
            ["--requantize-shared", "mxfp4", "--requantize-layers", "1,2", "--max-error", "0.001"],
            "layer 2 exceeds it",
        ),
    ],
)
def test_errors_are_one_line_exit_2_nothing_written(  # type: ignore[no-untyped-def]
    monkeypatch, capsys, hybrid: Path, tmp_path: Path, args: list[str], says: str
) -> None:
    dst = tmp_path / "out"
    code, _out, err = _convert(monkeypatch, capsys, hybrid, dst, *args)
    assert code == 2, err
    assert says in err
    assert len(err.strip().splitlines()) == 1
    assert not dst.exists() or not any(dst.iterdir())


def test_budget_error_names_the_worst_layer_with_its_error(  # type: ignore[no-untyped-def]
    monkeypatch, capsys, hybrid: Path
) -> None:
    code, _, err = run_main(
        monkeypatch, capsys, "plan", str(hybrid), "--requantize-shared", "mxfp4",
        "--requantize-layers", "1", "--max-error", "0.001",
    )  # fmt: skip
    assert code == 2 and "layer 1 exceeds it (MoE output error 0." in err


def test_auto_picks_the_layers_under_budget(monkeypatch, capsys, hybrid: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_main(
        monkeypatch, capsys, "plan", str(hybrid), "--format", "json", "--requantize-shared",
        "mxfp4", "--requantize-layers", "auto", "--max-error", "0.5",
    )  # fmt: skip
    assert code == 0, err
    rec = json.loads(out)["config"]["ckpt"]["requantized_shared"]
    errors = {int(n): e["moe_rel_error"] for n, e in rec["errors"].items()}
    assert rec["requested"] == sorted(n for n, e in errors.items() if e <= 0.5)
    assert errors[3] == errors[4] == 0.0  # already MXFP4: requantizing them changes nothing
    tight = min(errors[1], errors[2]) * 1.0001  # admits 3, 4 and the cheaper of 1, 2
    code, out, err = run_main(
        monkeypatch, capsys, "plan", str(hybrid), "--format", "json", "--requantize-shared",
        "mxfp4", "--requantize-layers", "auto", "--max-error", str(tight),
    )  # fmt: skip
    assert code == 0, err
    rec = json.loads(out)["config"]["ckpt"]["requantized_shared"]
    assert rec["requested"] == sorted(n for n, e in errors.items() if e <= tight)
    assert len(rec["requested"]) == 3


def test_auto_with_no_layer_under_budget_names_the_cheapest() -> None:
    from checkpoint_tool.errors import UsageError
    from checkpoint_tool.model import model_facts
    from checkpoint_tool.requant.select import RequantRequest, select_layers

    facts = model_facts(
        {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
         "num_hidden_layers": 3, "first_k_dense_replace": 1, "n_routed_experts": 4,
         "n_shared_experts": 1, "num_experts_per_tok": 2, "hidden_size": 64,
         "moe_intermediate_size": 32, "intermediate_size": 128},
    )  # fmt: skip
    assert [lf.layer for lf in facts.moe_layers] == [1, 2]
    req = RequantRequest.parse("mxfp4", "auto", 0.01)
    assert select_layers(req, facts, {1: 0.004, 2: 0.02}) == [1]
    with pytest.raises(UsageError, match="no layer meets the budget; the cheapest is layer 2"):
        select_layers(req, facts, {1: 0.5, 2: 0.02})


def test_already_mxfp4_is_a_noop_with_a_note(monkeypatch, capsys, hybrid: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_main(
        monkeypatch, capsys, "plan", str(hybrid), "--format", "json", "--requantize-shared",
        "mxfp4", "--requantize-layers", "3",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert any("layer 3: shared expert is already MXFP4; left as it is" in n for n in doc["notes"])
    pieces = [p for f in doc["files"] for t in f["tensors"] for p in t["pieces"]]
    assert not any("requant" in p or "@" in p["source"] for p in pieces)


def test_non_quark_source_is_refused(monkeypatch, capsys, synth_ckpt, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = synth_ckpt("deepseek-v3-fp8")
    code, _, err = _convert(
        monkeypatch, capsys, src, tmp_path / "o", "--requantize-shared", "mxfp4"
    )
    assert code == 2 and "must be a Quark export" in err


def test_shared_expert_without_weight_is_an_error(  # type: ignore[no-untyped-def]
    monkeypatch, capsys, hybrid: Path, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    shutil.copytree(hybrid, src)
    gone = "model.layers.1.mlp.shared_experts.up_proj.weight"
    index = json.loads((src / "model.safetensors.index.json").read_text())
    shard = src / index["weight_map"].pop(gone)
    tensors = load_file(str(shard))
    del tensors[gone]
    save_file(tensors, str(shard))
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    dst = tmp_path / "out"
    code, _, err = _convert(monkeypatch, capsys, src, dst, "--requantize-shared", "mxfp4")
    assert code == 2
    assert (
        "layer 1: shared expert module 'model.layers.1.mlp.shared_experts.up_proj' has no " in err
    )
    assert not dst.exists() or not any(dst.iterdir())
