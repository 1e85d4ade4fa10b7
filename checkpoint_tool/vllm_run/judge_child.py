"""Child process of the loader judge: load several checkpoints in vLLM, one after the other,
with the ``ckpt_engine_judge`` plugin switched on; the plugin writes each load's parameters.

Run by file path with an interpreter that has vLLM and the plugin (stdlib + vLLM only)::

    python judge_child.py jobs.json results.json

jobs.json (a list; one vLLM start-up is shared by all of them at TP 1)::

    [{"model": "/tmp/dst", "tp": 1, "load_format": "auto", "fse": true,
      "dump": "/tmp/dump/dst-tp1", "max_model_len": 64}]

results.json: one entry per job, ``{"loaded": true, "error": null, "vllm_version": "0.32.0"}``;
``error`` is ``"ExceptionType: message"`` of whatever stopped the load. The plugin stops
the engine right after its snapshot (``CKPT_ENGINE_JUDGE_STOP_AFTER_SNAPSHOT``): a load
whose snapshot was written and whose error is that stop counts as loaded.
"""

from __future__ import annotations

import gc
import json
import os
import sys


def _load(job: dict) -> dict:
    result: dict = {"loaded": False, "error": None, "vllm_version": None}
    os.environ["CKPT_ENGINE_JUDGE_DUMP"] = job["dump"]
    os.environ["CKPT_ENGINE_JUDGE_FSE"] = "1" if job.get("fse") else "0"
    tp = int(job.get("tp", 1))
    if tp > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        ncpu = os.cpu_count() or 1
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(r % ncpu) for r in range(tp))
    llm = None
    try:
        import vllm
        from vllm import LLM

        result["vllm_version"] = vllm.__version__
        llm = LLM(
            model=job["model"],
            tensor_parallel_size=tp,
            load_format=job.get("load_format", "auto"),
            dtype="bfloat16",
            max_model_len=int(job.get("max_model_len", 64)),
            max_num_seqs=4,
            enforce_eager=True,
            skip_tokenizer_init=True,
            seed=0,
            # vLLM's own "weights not initialized" check (whole parameters; the plugin
            # counts per expert); the sharded_state loader accepts no extra keys
            **(
                {"model_loader_extra_config": {"enable_weights_track": True}}
                if job.get("load_format", "auto") == "auto"
                else {}
            ),
        )
        result["loaded"] = True
    except BaseException as exc:  # the report is the point: any failure is data
        text = f"{type(exc).__name__}: {exc}".strip()
        result["error"] = text
    finally:
        del llm
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        except Exception:
            pass
    return result


def main() -> int:
    jobs_path, out_path = sys.argv[1], sys.argv[2]
    with open(jobs_path) as f:
        jobs = json.load(f)
    results = []
    for i, job in enumerate(jobs):
        print(f"=== ckpt judge job {i} ===", flush=True)  # the parent splits the log here
        results.append(_load(job))
        tmp = out_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f)
        os.replace(tmp, out_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
