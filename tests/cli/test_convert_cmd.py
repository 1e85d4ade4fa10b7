"""``ckpt convert`` through the real entry point: reports, dry run, exit codes, kill + resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoint_tool.catalog import open_local
from checkpoint_tool.cli.app import main
from checkpoint_tool.execute import faults, read_manifest
from checkpoint_tool.execute import writer as writer_mod
from checkpoint_tool.plan.serialize import plan_load


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch):
    monkeypatch.setattr(writer_mod, "DURABLE", False)


def _run(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["ckpt", "convert", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_json_report_and_a_complete_output(monkeypatch, capsys, synth_ckpt, tmp_path):
    src = synth_ckpt("quark-hybrid")
    dst = tmp_path / "out"
    code, out, err = _run(monkeypatch, capsys, str(src), str(dst), "--tp", "2", "--format", "json",
                          "--max-shard-size", "2MB", "--workers", "2")  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert report["files_written"] > 1 and report["workers"] == 2
    manifest = read_manifest(dst)
    assert manifest.options.tp == 2 and manifest.options.max_shard_size == 2_000_000
    assert [f.name for f in manifest.files] == sorted(p.name for p in dst.glob("*.safetensors"))
    assert "[1/" in err  # plain progress lines when stderr is not a terminal
    assert open_local(dst).config["moe_intermediate_size"] == 256  # padded for tp 2


def test_human_report(monkeypatch, capsys, synth_ckpt, tmp_path):
    code, out, _ = _run(monkeypatch, capsys, str(synth_ckpt("quark-mxfp4")), str(tmp_path / "o"),
                        "--no-progress")  # fmt: skip
    assert code == 0
    assert "converted" in out and "file(s) written" in out and "ckpt-manifest.json sha256" in out


def test_dry_run_prints_the_plan_and_writes_nothing(monkeypatch, capsys, synth_ckpt, tmp_path):
    src = synth_ckpt("quark-hybrid")
    dst = tmp_path / "out"
    code, out, _ = _run(monkeypatch, capsys, str(src), str(dst), "--tp", "2", "--dry-run")
    assert code == 0 and "nothing was written" in out and "fused shared experts" in out
    code, out, _ = _run(monkeypatch, capsys, str(src), str(dst), "--dry-run", "--format", "json")
    assert code == 0 and plan_load(out).files
    assert not dst.exists()


def test_layers_subset(monkeypatch, capsys, synth_ckpt, tmp_path):
    dst = tmp_path / "out"
    code, _, err = _run(monkeypatch, capsys, str(synth_ckpt("deepseek-v3-fp8")), str(dst),
                        "--layers", "3,4", "--no-progress")  # fmt: skip
    assert code == 0, err
    layers = {n.split(".")[2] for n in open_local(dst).tensors if n.startswith("model.layers.")}
    assert layers == {"3", "4"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "three"], "--layers"),
        (["--memory-budget", "lots"], "cannot read size"),
        (["--memory-budget", "1MB", "--workers", "4"], "too small"),
        (["--resume", "--overwrite"], "exclude each other"),
    ],
)
def test_bad_options_exit_2_with_one_line(monkeypatch, capsys, synth_ckpt, tmp_path, args, message):
    code, _, err = _run(
        monkeypatch, capsys, str(synth_ckpt("quark-mxfp4")), str(tmp_path / "o"), *args
    )
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_existing_dst_is_refused(monkeypatch, capsys, synth_ckpt, tmp_path):
    dst = tmp_path / "o"
    dst.mkdir()
    (dst / "x").write_text("x")
    code, _, err = _run(monkeypatch, capsys, str(synth_ckpt("quark-mxfp4")), str(dst))
    assert code == 2 and "exists and is not empty" in err and err.count("\n") == 1


def test_pickle_only_source_is_refused(monkeypatch, capsys, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "pytorch_model.bin").write_bytes(b"\x80\x02not really a pickle")
    code, _, err = _run(monkeypatch, capsys, str(src), str(tmp_path / "o"))
    assert code == 2 and "never" in err and "unpickle" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_sigkill_then_resume_through_the_cli_is_byte_identical(
    monkeypatch, capsys, synth_ckpt, tmp_path
):
    """A real `ckpt convert` process SIGKILLed mid-run, then `--resume` in another process."""
    src = synth_ckpt("quark-nvfp4")
    args = [sys.executable, "-m", "checkpoint_tool", "convert", str(src)]
    opts = ["--tp", "2", "--max-shard-size", "600KB", "--no-progress"]
    ref = tmp_path / "ref"
    monkeypatch.setenv("CKPT_FAULT_KILL_AT", str(10**9))  # count the fault points, never kill
    faults.reset()
    assert _run(monkeypatch, capsys, str(src), str(ref), *opts)[0] == 0
    monkeypatch.delenv("CKPT_FAULT_KILL_AT")
    kill_at = faults._count * 2 // 3
    dst = tmp_path / "dst"
    killed = subprocess.run([*args, str(dst), *opts], capture_output=True,
                            env={**os.environ, "CKPT_FAULT_KILL_AT": str(kill_at)})  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    assert list(dst.glob("model-*.safetensors")) and not (dst / "ckpt-manifest.json").exists()
    code, _, err = _run(monkeypatch, capsys, str(src), str(dst), *opts)
    assert code == 2 and "--resume" in err
    subprocess.run([*args, str(dst), *opts, "--resume"], check=True, capture_output=True)
    assert _tree(dst) == _tree(ref)
