"""Child process of the forward judge: load checkpoints in vLLM with the ``ckpt_engine_judge``
plugin's capability patches, dequantize every MXFP4 MoE / linear weight to BF16 after
loading, switch those layers to vLLM's unquantized methods and write teacher-forced prompt
logprobs.

Run by file path with an interpreter that has vLLM and the plugin (stdlib + torch + vLLM)::

    python forward_child.py jobs.json results.json

jobs.json (all loads in this one process, TP 1, one after the other)::

    [{"model": "out/model", "fse": true, "dump": "work/job0", "prompts": [[5, 17, 3]]}]

(``"shared_weight": 1.0`` routes the fused slots at that weight instead of vLLM's: a planted
fault for the judge's own test.)

results.json, one entry per job::

    {"loaded": true, "error": null, "prompt_logprobs": [[-6.2, -5.9]],
     "dequantized": {"moe": 3, "linear": 5}, "fused_routers": 3}

Why each substitute (none touches a weight loader, name / expert mapping or FSE redirection):

- Dequantization: vLLM's CPU build has no MXFP4 MoE / linear kernel (the emulation experts
  are Triton-only) and amd-quark 0.13's MXFP4 dequantization (``kernel_ext``) is HIP / CUDA
  only. vLLM's own pure-torch dequantizer (``_dequant_mxfp4_experts`` /
  ``_dequant_mxfp4_ue8m0_gran32`` in fused_moe/flashinfer_moe_ep.py, never ckpt's codecs)
  turns the *loaded* parameters into BF16; the layer then runs
  ``UnquantizedFusedMoEMethod`` (CPU: ``CPUUnquantizedExperts``) or
  ``UnquantizedLinearMethod``. This runs just before vLLM's
  ``process_weights_after_loading``.
- Fused shared-expert routing: ``create_fused_moe_router`` (fused_moe/router/
  router_factory.py) returns ``CPURouter`` on CPU, which ignores ``num_fused_shared_experts``
  and ``shared_expert_weight``; on ROCm AITER the fused slot ids ``n_routed ..`` are appended
  to every token's top-k at that weight (``1/routed_scaling_factor`` when the runner scales
  the output, as computed by vLLM in ``FusedMoEFactory``, fused_moe/layer.py). The wrapper
  below appends them to the CPU router's output with vLLM's own weight: a capability
  substitute for the ROCm AITER routing path.
"""

from __future__ import annotations

import gc
import json
import os
import sys

_STATS: dict = {"moe": 0, "linear": 0, "fused_routers": 0}
#: ``job["shared_weight"]``: route the fused slots at this weight instead of vLLM's
_OVERRIDE: list = []


def _to_bf16(model) -> None:  # type: ignore[no-untyped-def]
    import torch
    from vllm.model_executor.layers.fused_moe.flashinfer_moe_ep import (
        _dequant_mxfp4_experts,
        _dequant_mxfp4_ue8m0_gran32,
    )
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
        UnquantizedFusedMoEMethod,
    )
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod

    def fp4(mod, name: str) -> bool:  # type: ignore[no-untyped-def]
        w = getattr(mod, name, None)
        s = getattr(mod, name + "_scale", None)
        return (
            w is not None
            and s is not None
            and w.dtype == torch.uint8
            and s.shape[-1] * 16 == w.shape[-1]  # MXFP4: 2 codes a byte, 32 a scale
        )

    def swap(mod, name: str, value) -> None:  # type: ignore[no-untyped-def]
        delattr(mod, name)
        delattr(mod, name + "_scale")
        mod.register_parameter(name, torch.nn.Parameter(value, requires_grad=False))

    for mod in model.modules():
        if fp4(mod, "w13_weight") and fp4(mod, "w2_weight"):
            w13 = _dequant_mxfp4_experts(mod.w13_weight.data, mod.w13_weight_scale.data)
            w2 = _dequant_mxfp4_experts(mod.w2_weight.data, mod.w2_weight_scale.data)
            swap(mod, "w13_weight", w13)
            swap(mod, "w2_weight", w2)
            mod._replace_quant_method(UnquantizedFusedMoEMethod(mod.quant_method.moe))
            _STATS["moe"] += 1
        elif isinstance(mod, LinearBase) and fp4(mod, "weight"):
            w = _dequant_mxfp4_ue8m0_gran32(mod.weight.data, mod.weight_scale.data)
            swap(mod, "weight", w)
            mod.quant_method = UnquantizedLinearMethod()
            _STATS["linear"] += 1


def _fused_router(create):  # type: ignore[no-untyped-def]
    import torch
    from vllm.model_executor.layers.fused_moe.router.cpu_router import CPURouter

    def create_fused_moe_router(*args, **kwargs):  # type: ignore[no-untyped-def]
        router = create(*args, **kwargs)
        n_fused = int(kwargs.get("num_fused_shared_experts") or 0)
        if n_fused == 0 or not isinstance(router, CPURouter):
            return router
        first = int(kwargs["global_num_experts"])  # routed slots; fused ones follow
        weight = float(kwargs.get("shared_expert_weight", 1.0))
        if _OVERRIDE:  # a planted fault of the judge's own tests only
            weight = float(_OVERRIDE[0])
        compute = router._compute_routing

        def _compute_routing(hidden_states, router_logits, indices_type, **kw):  # type: ignore[no-untyped-def]
            topk_w, topk_ids = compute(hidden_states, router_logits, indices_type, **kw)
            t = topk_w.shape[0]
            ids = torch.arange(first, first + n_fused, dtype=topk_ids.dtype).expand(t, n_fused)
            ws = torch.full((t, n_fused), weight, dtype=topk_w.dtype)
            return (
                torch.cat([topk_w, ws], dim=1).contiguous(),
                torch.cat([topk_ids, ids], dim=1).contiguous(),
            )

        router._compute_routing = _compute_routing
        _STATS["fused_routers"] += 1
        return router

    return create_fused_moe_router


def _install() -> None:
    os.environ["CKPT_ENGINE_JUDGE"] = "1"
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # patches must reach the engine core
    from vllm.plugins import load_general_plugins

    load_general_plugins()  # the plugin's capability patches and its loader observers first
    from vllm.model_executor.layers.fused_moe import layer
    from vllm.model_executor.model_loader import base_loader

    process = base_loader.process_weights_after_loading

    def process_weights_after_loading(model, model_config, target_device):  # type: ignore[no-untyped-def]
        _to_bf16(model)
        return process(model, model_config, target_device)

    base_loader.process_weights_after_loading = process_weights_after_loading
    layer.create_fused_moe_router = _fused_router(layer.create_fused_moe_router)


def _run(job: dict) -> dict:
    result: dict = {"loaded": False, "error": None, "prompt_logprobs": None}
    for k in _STATS:
        _STATS[k] = 0
    _OVERRIDE[:] = [job["shared_weight"]] if job.get("shared_weight") is not None else []
    os.environ["CKPT_ENGINE_JUDGE_DUMP"] = job["dump"]
    os.environ["CKPT_ENGINE_JUDGE_FSE"] = "1" if job.get("fse") else "0"
    llm = None
    try:
        from vllm import LLM, SamplingParams

        llm = LLM(
            model=job["model"],
            tensor_parallel_size=1,
            load_format=job.get("load_format", "auto"),
            dtype="bfloat16",
            max_model_len=64,
            max_num_seqs=4,
            enforce_eager=True,
            skip_tokenizer_init=True,
            seed=0,
        )
        result["loaded"] = True
        prompts = [list(map(int, p)) for p in job["prompts"]]
        params = SamplingParams(prompt_logprobs=0, max_tokens=1, temperature=0.0, detokenize=False)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
        result["prompt_logprobs"] = [
            [out.prompt_logprobs[j][ids[j]].logprob for j in range(1, len(ids))]
            for out, ids in zip(outs, prompts, strict=True)
        ]
    except BaseException as exc:  # the report is the point: any failure is data
        result["error"] = f"{type(exc).__name__}: {exc}".strip()
    finally:
        del llm
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        except Exception:
            pass
    result["dequantized"] = {"moe": _STATS["moe"], "linear": _STATS["linear"]}
    result["fused_routers"] = _STATS["fused_routers"]
    return result


def main() -> int:
    jobs_path, out_path = sys.argv[1], sys.argv[2]
    with open(jobs_path) as f:
        jobs = json.load(f)
    _install()
    results = []
    for i, job in enumerate(jobs):
        print(f"=== ckpt forward job {i} ===", flush=True)
        results.append(_run(job))
        tmp = out_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f)
        os.replace(tmp, out_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
