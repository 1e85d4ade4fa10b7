"""The loader judge: load checkpoints in vLLM with the ``ckpt_engine_judge`` plugin on and
read back, per TP rank, every parameter as vLLM's own loader wrote it.

Several loads share one child process (``judge_child.py``): vLLM's start-up is paid once.
The plugin (package ``engine_judge/``, installed in the vLLM venv) replaces hardware
capability decisions only and stops the engine right after its snapshot.

Example::

    jobs = [JudgeJob("/tmp/dst", tp=2, fse=True), JudgeJob("/tmp/src", tp=2, fse=True)]
    out, src = run_judge(jobs, python=find_vllm_python(), work=Path("/tmp/judge"))
    out.loaded, out.error                   # True, None
    out.ranks[0].params["model.norm.weight"]  # uint8 tensor [256, 2] (shape + itemsize)
    out.ranks[0].writes[("model.layers.1.mlp.experts.routed_experts.w13_weight", "w1", 8)]  # 1
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from checkpoint_tool.vllm_run import engine_env

CHILD = Path(__file__).with_name("judge_child.py")


@dataclass(frozen=True)
class JudgeJob:
    """One load: ``fse`` requests fused shared experts (as ROCm AITER serving does)."""

    model: str
    tp: int = 1
    load_format: str = "auto"
    fse: bool = False


@dataclass
class RankSnapshot:
    """One TP rank's parameters (bytes, shaped ``[*shape, itemsize]``) and write counts."""

    params: dict
    dtypes: dict[str, str]
    meta: dict[str, dict]
    writes: dict[tuple[str, str | None, int | None], int]
    fse_layers: dict[str, bool]
    fse_model: bool | None
    moe: dict[str, dict]
    gate: dict[str, bool | str] = field(default_factory=dict)


@dataclass
class JudgeResult:
    """What vLLM said for one job; ``ranks`` is empty when it never reached the snapshot."""

    job: JudgeJob
    loaded: bool
    error: str | None
    ranks: list[RankSnapshot] = field(default_factory=list)
    #: vLLM's per-layer FSE gate answers (rank 0), also for a model it refused
    gate: dict[str, bool | str] = field(default_factory=dict)
    log: str = field(default="", repr=False)

    def failure_text(self) -> str:
        return f"{self.error or ''}\n{self.log[-6000:]}"


def _read_rank(folder: Path, rank: int) -> RankSnapshot:
    from safetensors.torch import load_file

    info = json.loads((folder / f"rank{rank}.json").read_text())
    flat = load_file(str(folder / f"rank{rank}.safetensors"))
    params = {}
    for name, meta in info["params"].items():
        raw = flat[name]
        n = 1
        for d in meta["shape"]:
            n *= d
        item = raw.numel() // n if n else 1
        params[name] = raw.reshape(*meta["shape"], item)
    writes = {(w[0], w[1], w[2]): int(w[3]) for w in info["writes"]}
    return RankSnapshot(
        params=params,
        dtypes={k: v["dtype"] for k, v in info["params"].items()},
        meta=info["params"],
        writes=writes,
        fse_layers=info["fse_layers"],
        fse_model=info["fse_model"],
        moe=info["moe"],
        gate=_read_gate(folder, rank),
    )


def _read_gate(folder: Path, rank: int) -> dict:
    path = folder / f"gate-rank{rank}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _root_cause(log: str) -> str | None:
    """The last ``SomeError: message`` a TP worker logged (vLLM's executor only says
    "WorkerProc initialization failed")."""
    import re

    hits = re.findall(r"\] ((?:\w+\.)*\w*(?:Error|Exception)): (.*)$", log, flags=re.M)
    hits = [h for h in hits if "WorkerProc initialization failed" not in h[1]]
    return f"{hits[-1][0].rsplit('.', 1)[-1]}: {hits[-1][1].strip()}" if hits else None


def judge_env() -> dict[str, str]:
    """The child's environment: the plugin on (and only it), the engine in-process."""
    env = engine_env(1)
    env.update(
        CKPT_ENGINE_JUDGE="1",
        CKPT_ENGINE_JUDGE_STOP_AFTER_SNAPSHOT="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        VLLM_PLUGINS="ckpt_engine_judge",
    )
    return env


def run_judge(
    jobs: list[JudgeJob], *, python: str, work: Path, timeout: float = 1500.0
) -> list[JudgeResult]:
    """Load ``jobs`` in order in one child; snapshots go under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    spec = []
    for i, job in enumerate(jobs):
        spec.append({**job.__dict__, "dump": str(work / f"job{i}")})
    jobs_path, out_path, log_path = work / "jobs.json", work / "results.json", work / "log"
    jobs_path.write_text(json.dumps(spec))
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [python, str(CHILD), str(jobs_path), str(out_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=judge_env(),
            cwd=work,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    return collect(jobs, work, seconds=time.monotonic() - start)


def collect(jobs: list[JudgeJob], work: Path, *, seconds: float = 0.0) -> list[JudgeResult]:
    """Read back what ``run_judge`` left under ``work`` (also after the fact)."""
    log_path, out_path = work / "log", work / "results.json"
    logs = log_path.read_text(errors="replace").split("=== ckpt judge job ")
    answers = json.loads(out_path.read_text()) if out_path.exists() else []
    results = []
    for i, job in enumerate(jobs):
        folder = work / f"job{i}"
        tail = next((t for t in logs if t.startswith(f"{i} ===")), "")[-20000:]
        gate = _read_gate(folder, 0)
        if i >= len(answers):
            why = f"judge child died (after {seconds:.0f} s)"
            results.append(JudgeResult(job, False, why, gate=gate, log=tail))
            continue
        error = answers[i]["error"]
        # the snapshot is taken once the weights are loaded (vLLM's own checks passed), on
        # every rank; the plugin then stops the engine
        have = [r for r in range(job.tp) if (folder / f"rank{r}.json").exists()]
        loaded = bool(answers[i]["loaded"]) or len(have) == job.tp
        ranks = [_read_rank(folder, r) for r in range(job.tp)] if loaded else []
        if not loaded and job.tp > 1:
            error = _root_cause(tail) or error  # the workers' exception, not the executor's
        results.append(
            JudgeResult(job, loaded, None if loaded else error, ranks, gate=gate, log=tail)
        )
    return results


__all__ = ["JudgeJob", "JudgeResult", "RankSnapshot", "collect", "judge_env", "run_judge"]
