"""Child process: load one checkpoint in vLLM and write teacher-forced prompt logprobs as JSON.

Run by file path with an interpreter that has vLLM (stdlib + vLLM only: ckpt need not be
installed there)::

    python child.py job.json result.json

job.json::

    {"model": "dst", "tp": 2, "load_format": "sharded_state",
     "prompts": [[5, 17, 3, 99], [8, 1, 2]], "max_model_len": 64, "dtype": "bfloat16"}

result.json::

    {"loaded": true, "error": null, "vllm_version": "0.32.0",
     "prompt_logprobs": [[-6.21, -5.87, -6.40], [-6.02, -6.33]]}

``prompt_logprobs[i][j]`` is the log-probability vLLM gives prompt token ``j + 1`` of prompt
``i`` given tokens ``0..j`` (greedy, eager, ``SamplingParams(prompt_logprobs=0,
max_tokens=1)``): the same numbers for the same weights, bit for bit, at the same TP.
``error`` is ``"ExceptionType: message"`` of whatever stopped the load or the run.
vLLM spawns workers, so everything runs under ``if __name__ == "__main__"``.
"""

from __future__ import annotations

import json
import os
import sys


def _run(job: dict) -> dict:
    result: dict = {"loaded": False, "error": None, "vllm_version": None, "prompt_logprobs": None}
    try:
        import vllm
        from vllm import LLM, SamplingParams

        result["vllm_version"] = vllm.__version__
        llm = LLM(
            model=job["model"],
            tensor_parallel_size=int(job.get("tp", 1)),
            load_format=job.get("load_format", "auto"),
            dtype=job.get("dtype", "bfloat16"),
            max_model_len=int(job.get("max_model_len", 64)),
            max_num_seqs=int(job.get("max_num_seqs", 8)),
            enforce_eager=True,
            skip_tokenizer_init=True,
            seed=0,
            **job.get("llm_kwargs", {}),
        )
        result["loaded"] = True
        prompts = [list(map(int, p)) for p in job.get("prompts", [])]
        if prompts:
            params = SamplingParams(
                prompt_logprobs=0, max_tokens=1, temperature=0.0, detokenize=False
            )
            outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
            rows = []
            for out, ids in zip(outs, prompts, strict=True):
                plp = out.prompt_logprobs or []
                rows.append([plp[j][ids[j]].logprob for j in range(1, len(ids))])
            result["prompt_logprobs"] = rows
    except BaseException as exc:  # the report is the point: any failure is data
        result["error"] = f"{type(exc).__name__}: {exc}".strip()
    return result


def main() -> int:
    job_path, out_path = sys.argv[1], sys.argv[2]
    with open(job_path) as f:
        job = json.load(f)
    result = _run(job)
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, out_path)
    sys.stdout.flush()
    sys.stderr.flush()
    # vLLM's engine threads can hang interpreter shutdown; the result is already on disk
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
