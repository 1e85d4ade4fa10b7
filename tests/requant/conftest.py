"""Shared pieces of the requantization tests: a converted quark-hybrid output.

``quark-hybrid`` (tiny, seed 0) has four MoE layers: layer 1's shared expert is BF16 and
excluded by Quark, layer 2's is block FP8 (its own ``layer_quant_config`` entries), layers 3
and 4 are MXFP4 already. On ``vllm-0.33-rocm-aiter-fse`` (all MoE layers or none) it fuses only
once layers 1 and 2 are requantized.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

FSE_TARGET = "vllm-0.33-rocm-aiter-fse"


@pytest.fixture(scope="session")
def hybrid(synth_ckpt: Callable[..., Path]) -> Path:
    return synth_ckpt("quark-hybrid")


@pytest.fixture(scope="session")
def converted(hybrid: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``ckpt convert quark-hybrid --target FSE --requantize-shared mxfp4`` (all layers)."""
    from checkpoint_tool.cli.session import open_plan
    from checkpoint_tool.execute import execute_plan
    from checkpoint_tool.plan.model import PlanOptions
    from checkpoint_tool.requant.select import RequantRequest

    dst = tmp_path_factory.mktemp("requant") / "out"
    catalog, plan = open_plan(
        str(hybrid),
        PlanOptions(target=FSE_TARGET),
        recipe=None,
        headers_only=False,
        requant=RequantRequest.parse("mxfp4", None, None),
    )
    execute_plan(plan, catalog, dst, progress=False)
    return dst
