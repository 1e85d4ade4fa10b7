"""Triton grouped-GEMM kernels of the MoE runtime (import needs ``triton``).

``gate_up_silu`` / ``down_weighted`` launch the kernel family of ``grouped_gemm.py``;
``choose_configs`` picks their tiles.

CPU guard: triton decides between compiling and interpreting when it is imported (its own
library functions are decorated then). On a machine without CUDA, if triton is not imported
yet and ``TRITON_INTERPRET`` is unset, this package sets ``TRITON_INTERPRET=1`` first, so the
same kernels run in the interpreter on CPU tensors (tests, CI).
"""

from __future__ import annotations

import os
import sys

import torch

from checkpoint_tool.errors import UsageError

if "triton" not in sys.modules and "TRITON_INTERPRET" not in os.environ:
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

try:
    import triton  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise UsageError(
        "the triton backend needs the 'triton' package (pip install 'checkpoint-tool[triton]'); "
        "or run with backend='torch'"
    ) from exc

from checkpoint_tool.runtime.kernels.config import GemmConfig, MoeConfigs, choose_configs
from checkpoint_tool.runtime.kernels.elementwise import quantize_fp8_groups, reduce_split_k
from checkpoint_tool.runtime.kernels.grouped_gemm import INTERPRETED
from checkpoint_tool.runtime.kernels.launch import down_weighted, gate_up_silu

__all__ = [
    "INTERPRETED",
    "GemmConfig",
    "MoeConfigs",
    "choose_configs",
    "down_weighted",
    "gate_up_silu",
    "quantize_fp8_groups",
    "reduce_split_k",
]
