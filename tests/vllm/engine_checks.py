"""Helpers the engine-tier tests share (imported by name: tests/vllm is no package, so that
it can never shadow the real ``vllm`` on sys.path)."""

from __future__ import annotations

import random


def _prompt(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 512) for _ in range(n)]


#: teacher-forced prompts (token ids < 512, the tiny presets' vocab): fixed, several lengths
PROMPTS: list[list[int]] = [_prompt(0, 12), _prompt(1, 7), _prompt(2, 16)]


def ckpt_cli(*argv: str) -> int:
    """Run ``ckpt *argv`` in this process (what a user types); return the exit code."""
    import sys

    from checkpoint_tool.cli.app import main

    saved = sys.argv
    sys.argv = ["ckpt", *argv]
    try:
        main()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        sys.argv = saved
    return 0


def same_logprobs(a, b) -> None:  # type: ignore[no-untyped-def]
    """Both engine runs loaded and their prompt logprobs are equal, bit for bit."""
    assert a.loaded, a.failure_text()
    assert b.loaded, b.failure_text()
    assert a.prompt_logprobs and all(len(r) > 1 for r in a.prompt_logprobs)
    assert a.prompt_logprobs == b.prompt_logprobs
