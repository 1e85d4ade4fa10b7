"""`ckpt demo` (the README's main command) runs every step and each step does its job."""

from __future__ import annotations

import json
import sys

import pytest

from checkpoint_tool.cli.app import main


def test_demo_runs_the_whole_pipeline(tmp_path, monkeypatch, capsys):
    # the engine step loads two checkpoints in vLLM where one is installed: the engine tier
    # runs it (tests/vllm/test_demo_engine.py); here it is off, and its absence path is below
    monkeypatch.setattr(sys, "argv", ["ckpt", "demo", "--workdir", str(tmp_path), "--no-engine"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    out = capsys.readouterr().out
    assert exit_info.value.code == 0, out[-3000:]
    assert "demo finished: every step passed" in out
    for step in ("synth", "inspect", "plan", "convert", "verify", "validate"):
        assert f"$ ckpt {step} " in out, step
    manifest = json.loads((tmp_path / "dst" / "ckpt-manifest.json").read_text())
    assert manifest["files"], "convert wrote no shard"
    config = json.loads((tmp_path / "dst" / "config.json").read_text())
    # the default target is a stock vLLM, which fuses no shared experts: the demo's output
    # keeps them a separate MLP so that vLLM loads it
    assert config["ckpt"]["tp"] == 2 and config["ckpt"]["fse_layers"] == []
    assert config["ckpt"]["target"] == "vllm-0.33"


def test_demo_engine_step_says_how_to_install_vllm_when_absent(tmp_path, capsys):
    from checkpoint_tool.cli.demo_engine import engine_check

    check = engine_check(tmp_path, str(tmp_path / "no-python"), lambda src, dst: 0)
    assert check.status == "skipped"
    assert "make test-vllm" in check.message and "no-python" in check.message
