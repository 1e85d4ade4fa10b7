"""The demo's last step: load a converted checkpoint in a real vLLM and compare its numbers.

vLLM's CPU build has no MXFP4 / NVFP4 kernels, so the engine check converts a BF16
DeepSeek-V3 twin of the demo model with the same command (``convert --tp 2``) and has vLLM
compute teacher-forced prompt logprobs of the source and of the output at TP 2: they must be
equal bit for bit. Without vLLM it says how to get one (``make test-vllm`` builds .venv-vllm).

Example::

    check = engine_check(Path("demo"), python=None)   # None: search (.venv-vllm, ...)
    check.status, check.tokens, check.max_diff              # ("passed", 32, 0.0)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path


def _prompts() -> list[list[int]]:
    out = []
    for seed, n in ((0, 12), (1, 7), (2, 16)):
        rng = random.Random(seed)
        out.append([rng.randrange(1, 512) for _ in range(n)])
    return out


@dataclass
class EngineCheck:
    """What the engine step found; ``status``: passed | failed | skipped."""

    status: str
    message: str
    tokens: int = 0
    max_diff: float | None = None
    vllm_version: str | None = None
    seconds: float = 0.0


def engine_check(work: Path, python: str | None, convert) -> EngineCheck:  # type: ignore[no-untyped-def]
    """Synth a BF16 twin, ``convert(src, dst)`` it (the demo's own command runner), load both
    in vLLM at TP 2 and compare. ``python``: an interpreter with vLLM (None: search)."""
    from checkpoint_tool.synth import synth_checkpoint
    from checkpoint_tool.vllm_run import INSTALL_HINT, find_vllm_python, run_engine

    py = find_vllm_python(python)
    if py is None:
        where = f" ({python} cannot import vllm)" if python else ""
        return EngineCheck("skipped", f"{INSTALL_HINT}{where}")
    src, dst = work / "engine-src", work / "engine-dst"
    synth_checkpoint("deepseek-v3-bf16", src, overwrite=True)
    code = convert(src, dst)
    if code != 0:
        return EngineCheck("failed", f"ckpt convert of the BF16 twin exited {code}")
    prompts = _prompts()
    ref = run_engine(src, tp=2, prompts=prompts, python=py)
    out = run_engine(dst, tp=2, prompts=prompts, python=py)
    seconds = ref.seconds + out.seconds
    for what, r in (("the source", ref), ("ckpt's output", out)):
        if not r.loaded or r.prompt_logprobs is None:
            first = (r.error or "no result").splitlines()[0]
            return EngineCheck("failed", f"vLLM did not run {what}: {first}", seconds=seconds)
    pairs = [
        (a, b)
        for ra, rb in zip(ref.prompt_logprobs, out.prompt_logprobs, strict=True)  # type: ignore[arg-type]
        for a, b in zip(ra, rb, strict=True)
    ]
    diff = max(abs(a - b) for a, b in pairs)
    status = "passed" if diff == 0 else "failed"
    return EngineCheck(
        status,
        f"vLLM {out.vllm_version} (TP 2) loaded ckpt's output; prompt logprobs of {len(pairs)} "
        f"tokens vs the source: max |diff| {diff:g}" + (" (bit for bit)" if diff == 0 else ""),
        tokens=len(pairs),
        max_diff=diff,
        vllm_version=out.vllm_version,
        seconds=seconds,
    )
