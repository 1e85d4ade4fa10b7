"""Fixtures for the vllm-sharded layout tests: tiny sources, converted outputs (cached).

``layout_src(preset)`` is a synth checkpoint small enough for fast TP 1/2/4 conversions. Presets
with block-FP8 attention get attention sizes vLLM accepts at TP 4 (q_lora_rank 128: the
fused_qkv_a_proj merge needs whole 128-row blocks; 8 heads of 64+64: 128-row head groups per
rank), built from the preset's own builder with other Dims; the others use the tiny preset
with 4 routed experts.

``sharded(preset, tp, **options)`` plans ``--layout vllm-sharded`` and executes it:
``(source catalog, plan, output dir)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from checkpoint_tool.catalog import open_local
from checkpoint_tool.execute import execute_plan, writer
from checkpoint_tool.plan.build import plan_for_catalog
from checkpoint_tool.plan.model import PlanOptions
from checkpoint_tool.synth import PRESETS
from checkpoint_tool.synth.builder import write_layout
from checkpoint_tool.synth.presets.base import PresetOptions

#: presets whose attention is block FP8: they need vLLM-compatible attention sizes
BLOCK_FP8_ATTENTION = {"deepseek-v3-fp8", "quark-hybrid"}
#: DeepSeek-V3 presets the vllm-0.33 target supports (the Qwen spec is judged by the engine
#: tier, tests/vllm/test_qwen_engine.py, and tests/layouts/test_qwen_sharded.py)
#: (compressed-tensors presets are refused by the vllm-sharded layout: no spec for their names)
SHARDED_PRESETS = sorted(
    p
    for p, spec in PRESETS.items()
    if spec.family == "deepseek_v3" and spec.producer != "compressed-tensors"
)


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "DURABLE", False)


@pytest.fixture(scope="session")
def layout_src(synth_ckpt, tmp_path_factory) -> Callable[..., Path]:
    cache: dict[str, Path] = {}

    def get(preset: str, **opts: object) -> Path:
        key = json.dumps([preset, opts], sort_keys=True)
        if key in cache:
            return cache[key]
        if preset in BLOCK_FP8_ATTENTION:
            spec = PRESETS[preset]
            update = {"n_routed": 4, "q_lora_rank": 128, "heads": 8, "qk_nope": 64,
                      "qk_rope": 64, "v_head": 64, "kv_lora_rank": 64}  # fmt: skip
            update.update({k: v for k, v in opts.items() if k in ("n_shared", "num_layers")})
            dims = spec.tiny.model_copy(update=update)
            layout = spec.build(dims, PresetOptions())
            layout.family = spec.family
            dst = tmp_path_factory.mktemp(f"aligned-{preset}") / "ckpt"
            write_layout(layout, dst, seed=1)
            cache[key] = dst
        else:
            cache[key] = synth_ckpt(preset, n_routed=4, **opts)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def sharded(layout_src, tmp_path_factory) -> Callable[..., tuple]:
    cache: dict[str, tuple] = {}

    def get(preset: str, tp: int, src_opts: dict | None = None, **options: object) -> tuple:
        key = json.dumps([preset, tp, src_opts, options], sort_keys=True)
        if key not in cache:
            cat = open_local(layout_src(preset, **(src_opts or {})))
            plan = plan_for_catalog(
                cat,
                PlanOptions(tp=tp, layout="vllm-sharded", **options),  # type: ignore[arg-type]
            )
            dst = tmp_path_factory.mktemp(f"sharded-{preset}-tp{tp}") / "out"
            durable, writer.DURABLE = writer.DURABLE, False
            try:
                execute_plan(plan, cat, dst, progress=False)
            finally:
                writer.DURABLE = durable
            cache[key] = (cat, plan, dst)
        return cache[key]

    return get
