"""The capability patches: the hardware decisions a CPU build answers "no" to, answered with
vLLM's own emulation kernels instead. Nothing here touches weight loading, name or expert
mapping, fused-shared-expert (FSE) redirection or TP slicing.

``PATCHES`` is the table docs/vllm-proof.md reproduces::

    PATCHES[0].target   # "vllm.model_executor.kernels.linear._POSSIBLE_MXFP4_KERNELS[CPU]"
    PATCHES[0].why      # "no CPU entry: init_mxfp4_linear_kernel raises ..."
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

#: set to 1 to *request* FSE (what VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS=1 asks on ROCm)
FSE_ENV = "CKPT_ENGINE_JUDGE_FSE"


@dataclass(frozen=True)
class Patch:
    """One replaced decision: the vLLM object it replaces and why."""

    target: str
    why: str
    apply: Callable[[], None]


def _mxfp4_linear() -> None:
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.kernels.linear.mxfp4.emulation import EmulationMxfp4LinearKernel
    from vllm.platforms import PlatformEnum

    linear._POSSIBLE_MXFP4_KERNELS[PlatformEnum.CPU] = [EmulationMxfp4LinearKernel]


def _nvfp4_linear() -> None:
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.kernels.linear.nvfp4.emulation import EmulationNvFp4LinearKernel
    from vllm.platforms import PlatformEnum

    linear._POSSIBLE_NVFP4_KERNELS[PlatformEnum.CPU] = [EmulationNvFp4LinearKernel]


def _rebind(module_name: str, attr: str, new: object) -> None:
    """Set ``module.attr = new`` and in every loaded module that imported the old object by
    name (``from ... import attr``), so each caller asks the replacement."""
    import importlib

    module = importlib.import_module(module_name)
    old = getattr(module, attr)
    if getattr(old, "__ckpt_judge__", False):
        return
    new.__ckpt_judge__ = True  # type: ignore[attr-defined]
    for name, mod in list(sys.modules.items()):
        if name.startswith("vllm") and getattr(mod, "__dict__", {}).get(attr) is old:
            setattr(mod, attr, new)


def _mxfp4_moe() -> None:
    import vllm.model_executor.layers.fused_moe.oracle.mxfp4 as oracle

    def select_mxfp4_moe_backend(config, activation_key=None):  # type: ignore[no-untyped-def]
        backend = oracle.Mxfp4MoeBackend.EMULATION
        return backend, oracle.backend_to_kernel_cls(backend)[0]

    def select_deepseek_v4_mxfp4_moe_backend(config):  # type: ignore[no-untyped-def]
        return select_mxfp4_moe_backend(config)

    _preload_moe_callers()
    _rebind(oracle.__name__, "select_mxfp4_moe_backend", select_mxfp4_moe_backend)
    _rebind(
        oracle.__name__,
        "select_deepseek_v4_mxfp4_moe_backend",
        select_deepseek_v4_mxfp4_moe_backend,
    )


def _nvfp4_moe() -> None:
    import vllm.model_executor.layers.fused_moe.oracle.nvfp4 as oracle

    def select_nvfp4_moe_backend(config, weight_key, activation_key):  # type: ignore[no-untyped-def]
        backend = oracle.NvFp4MoeBackend.EMULATION
        return backend, oracle.backend_to_kernel_cls(backend)[0]

    _preload_moe_callers()
    _rebind(oracle.__name__, "select_nvfp4_moe_backend", select_nvfp4_moe_backend)


def _preload_moe_callers() -> None:
    """Import the quantization methods that pick MoE backends, so ``_rebind`` reaches them."""
    import importlib

    for name in (
        "vllm.model_executor.layers.quantization.quark.quark_moe",
        "vllm.model_executor.layers.quantization.modelopt",
        "vllm.model_executor.layers.quantization.mxfp4",
        "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe",
    ):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _fp8_block_amx() -> None:
    from vllm import _custom_ops as ops
    from vllm.model_executor.kernels.linear.scaled_mm import cpu

    def is_supported(cls, compute_capability=None):  # type: ignore[no-untyped-def]
        if not ops._supports_cpu_fp8_w8a16:
            return False, "fp8_scaled_mm_cpu op not available."
        return True, None

    cpu.CPUFp8BlockScaledMMKernel.is_supported = classmethod(is_supported)


def _fp8_moe_amx() -> None:
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe
    from vllm.platforms import CpuArchEnum, current_platform

    def _supports_current_device() -> bool:
        return current_platform.is_cpu() and (
            current_platform.get_cpu_architecture() == CpuArchEnum.X86
        )

    cpu_moe.CPUExpertsFp8._supports_current_device = staticmethod(_supports_current_device)


def _fse_request() -> None:
    from vllm._aiter_ops import rocm_aiter_ops

    def is_fusion_moe_shared_experts_enabled(cls) -> bool:  # type: ignore[no-untyped-def]
        return os.environ.get(FSE_ENV) == "1"  # read per call: one process, several loads

    rocm_aiter_ops.is_fusion_moe_shared_experts_enabled = classmethod(
        is_fusion_moe_shared_experts_enabled
    )


def _aiter_topk_buffer() -> None:
    import vllm.model_executor.layers.fused_moe.expert_map_manager as emm

    def init_aiter_topK_meta_data(*args, **kwargs):  # type: ignore[no-untyped-def]
        """The CPU has no cuda device for AITER's shared-expert top-k buffer; the CPU
        loader path never reads it (the judge runs no forward of fused slots)."""
        return None

    _rebind(emm.__name__, "init_aiter_topK_meta_data", init_aiter_topK_meta_data)


PATCHES: list[Patch] = [
    Patch(
        "vllm.model_executor.kernels.linear._POSSIBLE_MXFP4_KERNELS[PlatformEnum.CPU]",
        "no CPU entry, so init_mxfp4_linear_kernel raises for every Quark MXFP4 linear; the "
        "entry becomes [EmulationMxfp4LinearKernel] (dequantize + F.linear, amd-quark)",
        _mxfp4_linear,
    ),
    Patch(
        "vllm.model_executor.kernels.linear._POSSIBLE_NVFP4_KERNELS[PlatformEnum.CPU]",
        "no CPU entry, so init_nvfp4_linear_kernel raises for NVFP4 linears; the entry "
        "becomes [EmulationNvFp4LinearKernel]",
        _nvfp4_linear,
    ),
    Patch(
        "vllm.model_executor.layers.fused_moe.oracle.mxfp4.select_mxfp4_moe_backend",
        "raises on CPU before quark_moe.py reaches its emulation fallback; answers "
        "(Mxfp4MoeBackend.EMULATION, its experts class); likewise "
        "select_deepseek_v4_mxfp4_moe_backend (DeepSeek-V4 FP4 experts, quantization/mxfp4.py)",
        _mxfp4_moe,
    ),
    Patch(
        "vllm.model_executor.layers.fused_moe.oracle.nvfp4.select_nvfp4_moe_backend",
        "raises on CPU (no NVFP4 MoE backend); answers (NvFp4MoeBackend.EMULATION, its "
        "experts class)",
        _nvfp4_moe,
    ),
    Patch(
        "vllm.model_executor.kernels.linear.scaled_mm.cpu.CPUFp8BlockScaledMMKernel.is_supported",
        "refuses CPUs without AMX tiles; the AMX test is dropped, the op-availability test "
        "kept (fp8_scaled_mm_cpu runs on AVX-512 too)",
        _fp8_block_amx,
    ),
    Patch(
        "vllm.model_executor.layers.fused_moe.experts.cpu_moe.CPUExpertsFp8._supports_current_device",
        "refuses x86 CPUs without AMX tiles (select_fp8_moe_backend then finds no FP8 MoE "
        "backend: 'Unsupported FP8 MoE backend: NONE'); the AMX test is dropped, the x86 test "
        "kept",
        _fp8_moe_amx,
    ),
    Patch(
        "vllm._aiter_ops.rocm_aiter_ops.is_fusion_moe_shared_experts_enabled",
        f"returns None off ROCm, so FSE is never requested; returns {FSE_ENV}=='1' (the "
        "request only: vLLM's own gate, resolve_layer_fused_shared_expert, still decides)",
        _fse_request,
    ),
    Patch(
        "vllm.model_executor.layers.fused_moe.expert_map_manager.init_aiter_topK_meta_data",
        "allocates AITER's shared-expert top-k buffer on cuda; a no-op (no cuda device)",
        _aiter_topk_buffer,
    ),
]


def apply_all() -> None:
    """Apply every patch (idempotent: vLLM loads plugins once per process, maybe more)."""
    for patch in PATCHES:
        patch.apply()
