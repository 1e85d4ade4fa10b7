"""The demo's engine step (``ckpt demo``, step 7) with the installed vLLM: it passes, and it
compares numbers (a wrong conversion fails it)."""

from __future__ import annotations

from engine_checks import ckpt_cli

from checkpoint_tool.cli.demo_engine import engine_check


def test_demo_engine_step_passes_bit_for_bit(tmp_path, vllm_python):
    def convert(src, dst):  # type: ignore[no-untyped-def]
        return ckpt_cli("convert", str(src), str(dst), "--tp", "2", "--no-progress", "--no-fsync")

    check = engine_check(tmp_path, vllm_python, convert)
    assert check.status == "passed", check.message
    assert check.max_diff == 0 and check.tokens == 32 and check.vllm_version
