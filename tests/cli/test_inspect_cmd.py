"""``ckpt inspect`` through the real entry point: formats, options, exit codes."""

from __future__ import annotations

import json
import sys

import pytest

from checkpoint_tool.cli.app import main
from checkpoint_tool.policy import PolicyReport


def _run(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    if "--target" not in argv:  # the gates' per-layer decisions (stock vLLM fuses none)
        argv = (*argv, "--target", "vllm-per-layer-fse")
    monkeypatch.setattr(sys, "argv", ["ckpt", "inspect", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_json_is_a_valid_policy_report(monkeypatch, capsys, synth_ckpt):
    src = synth_ckpt("quark-hybrid")
    code, out, _ = _run(monkeypatch, capsys, str(src), "--tp", "2", "--format", "json")
    report = PolicyReport.model_validate(json.loads(out))
    assert report.tp == 2 and report.summary.fse_enabled_layers == [3, 4]
    # the policy itself has warnings only; the engine section (vLLM 0.33 fuses all-or-nothing)
    # refuses the per-layer mix, which makes the run exit 1
    assert report.summary.errors == 0
    assert report.engine is not None and report.engine.has_errors
    assert code == 1
    assert report.model.header_bytes_read > 0
    # headers only: a tiny fraction of the data the headers describe
    assert report.model.header_bytes_read < report.model.data_bytes


def test_human_output_has_the_table_and_the_engine_sentence(monkeypatch, capsys, synth_ckpt):
    src = synth_ckpt("quark-hybrid")
    _, out, _ = _run(monkeypatch, capsys, str(src), "--tp", "2")
    assert (
        "fused shared experts: enabled on MoE layer(s) [3, 4]; disabled on MoE layer(s) [1, 2]"
        in out
    )
    assert "Quark excludes shared experts at" in out
    assert "mxfp4/32" in out and "pad 128" in out


def test_markdown_for_pr_comments(monkeypatch, capsys, synth_ckpt):
    src = synth_ckpt("quark-hybrid")
    _, out, _ = _run(monkeypatch, capsys, str(src), "--format", "markdown")
    assert out.startswith("### ckpt inspect:")
    assert "| layer | routed | shared | FSE |" in out
    assert "**fused shared experts: enabled on MoE layer(s) [3, 4]" in out


def test_exit_0_when_clean_and_1_on_policy_errors(monkeypatch, capsys, synth_ckpt):
    src = synth_ckpt("quark-fp8-per-tensor", n_shared=2)
    code, out, _ = _run(monkeypatch, capsys, str(src), "--format", "json")
    report = PolicyReport.model_validate(json.loads(out))
    assert code == 0 and not report.has_errors and report.summary.fse_enabled_layers == []
    # --fse on: the per-tensor scales cannot be chunked into two slots -> error, exit 1
    code, out, _ = _run(monkeypatch, capsys, str(src), "--fse", "on", "--format", "json")
    report = PolicyReport.model_validate(json.loads(out))
    assert code == 1
    assert [i.rule for i in report.issues if i.severity == "error"] == ["fse_required"]


def test_ep_and_all2all_options_reach_the_report(monkeypatch, capsys, synth_ckpt):
    src = synth_ckpt("quark-hybrid")
    argv = [str(src), "--ep", "--eplb", "--all2all", "nixl_ep", "--format", "json"]
    _, out, _ = _run(monkeypatch, capsys, *argv)
    report = PolicyReport.model_validate(json.loads(out))
    assert (report.ep, report.eplb, report.all2all) == (True, True, "nixl_ep")
    assert report.summary.fse_enabled_layers == []
    assert "--ep, --eplb, --all2all nixl_ep" in report.layer(3).fse.reason


def test_bad_input_and_bad_options_exit_2(monkeypatch, capsys, tmp_path, synth_ckpt):
    code, _, err = _run(monkeypatch, capsys, str(tmp_path / "nope"))
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    code, _, err = _run(monkeypatch, capsys, str(synth_ckpt("quark-hybrid")), "--eplb")
    assert code == 2 and "--eplb" in err
    code, _, _ = _run(monkeypatch, capsys, str(synth_ckpt("quark-hybrid")), "--tp", "0")
    assert code == 2


def test_help_has_examples(monkeypatch, capsys):
    code, out, _ = _run(monkeypatch, capsys, "--help")
    assert code == 0 and "ckpt inspect /models/DeepSeek-R1 --tp 8" in out


@pytest.mark.parametrize("preset", ["quark-hybrid", "deepseek-v3-fp8", "modelopt-nvfp4"])
def test_inspect_never_imports_torch(synth_ckpt, fresh_cli, preset):
    """Headers only, so no torch: importing it alone costs ~2 s, the R1 target is < 2 s."""
    code, torch_imported, err = fresh_cli("inspect", str(synth_ckpt(preset)), "--format", "json")
    assert code in (0, 1), err
    assert not torch_imported
