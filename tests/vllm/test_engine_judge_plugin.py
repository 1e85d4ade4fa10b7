"""The ``ckpt_engine_judge`` plugin is installed where the tier runs, inert unless
``CKPT_ENGINE_JUDGE=1``, and then replaces exactly the decisions its table lists.

One child (the vLLM interpreter): vLLM's own plugin loader (``load_general_plugins``) runs the
entry point, first without the variable, then ``register()`` again with it.
"""

from __future__ import annotations

import json
import os
import subprocess

PROBE = r"""
import json, os, sys
from vllm.plugins import load_general_plugins
from vllm.model_executor.kernels import linear
from vllm.model_executor.kernels.linear.scaled_mm.cpu import CPUFp8BlockScaledMMKernel
from vllm.platforms import PlatformEnum
import vllm.model_executor.layers.fused_moe.oracle.mxfp4 as mxfp4

def state():
    return {
        "mxfp4_cpu": [k.__name__ for k in linear._POSSIBLE_MXFP4_KERNELS.get(PlatformEnum.CPU, [])],
        "nvfp4_cpu": [k.__name__ for k in linear._POSSIBLE_NVFP4_KERNELS.get(PlatformEnum.CPU, [])],
        "fp8_block_is_supported": CPUFp8BlockScaledMMKernel.is_supported.__func__.__module__,
        "select_mxfp4": mxfp4.select_mxfp4_moe_backend.__module__,
    }

load_general_plugins()  # the entry point, as every vLLM process runs it
before = state()
os.environ["CKPT_ENGINE_JUDGE"] = "1"
import ckpt_engine_judge
ckpt_engine_judge.register()
from ckpt_engine_judge.capability import PATCHES
print(json.dumps({"before": before, "after": state(), "patches": len(PATCHES)}))
"""


def test_inert_without_the_variable_and_patches_with_it(vllm_python):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPT_ENGINE_JUDGE")}
    env["VLLM_PLUGINS"] = "ckpt_engine_judge"
    run = subprocess.run(
        [vllm_python, "-c", PROBE], capture_output=True, text=True, timeout=600, env=env
    )
    assert run.returncode == 0, run.stderr[-4000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    before, after = got["before"], got["after"]
    assert before["mxfp4_cpu"] == [] and before["nvfp4_cpu"] == []
    assert before["fp8_block_is_supported"].startswith("vllm.")
    assert before["select_mxfp4"].startswith("vllm.")
    assert after["mxfp4_cpu"] == ["EmulationMxfp4LinearKernel"]
    assert after["nvfp4_cpu"] == ["EmulationNvFp4LinearKernel"]
    assert after["fp8_block_is_supported"] == "ckpt_engine_judge.capability"
    assert after["select_mxfp4"] == "ckpt_engine_judge.capability"
    assert got["patches"] == 8
