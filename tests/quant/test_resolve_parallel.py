"""On a large catalog, ``resolve_catalog`` checks modules in a forked child and the caller;
the result is the one a single process computes: same tensors, same issues, same order."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

from checkpoint_tool.catalog.catalog import Catalog, TensorEntry
from checkpoint_tool.quant import resolve as resolve_mod
from checkpoint_tool.quant.resolve import resolve_catalog

CONFIG = {
    "model_type": "deepseek_v3",
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
}


def _catalog(seed: int, layers: int = 4, experts: int = 96) -> Catalog:
    """A DeepSeek block-FP8 layout (headers only) with defects sprinkled at random."""
    rng = random.Random(seed)  # defects at ~1 % of the experts
    tensors: dict[str, TensorEntry] = {}

    def add(name: str, dtype: str, shape: tuple[int, ...]) -> None:
        tensors[name] = TensorEntry(name, f"s{len(tensors) % 7}.safetensors", dtype, shape, 0, 0)

    for layer in range(layers):
        for p in ("q_a_proj", "kv_a_proj_with_mqa"):
            m = f"model.layers.{layer}.self_attn.{p}"
            add(f"{m}.weight", "F8_E4M3", (512, 256))
            add(f"{m}.weight_scale_inv", "F32", (4, 2))
        for e in range(experts):
            for proj, shape in (
                ("gate_proj", (256, 512)),
                ("up_proj", (256, 512)),
                ("down_proj", (512, 256)),
            ):
                m = f"model.layers.{layer}.mlp.experts.{e}.{proj}"
                add(f"{m}.weight", "F8_E4M3", shape)
                scale = (-(-shape[0] // 128), -(-shape[1] // 128))
                roll = rng.random()
                if roll < 0.01:
                    continue  # missing scale
                if roll < 0.02:
                    scale = (scale[0] + 1, scale[1])  # wrong scale shape
                add(f"{m}.weight_scale_inv", "BF16" if roll > 0.99 else "F32", scale)
    add("model.layers.0.mlp.experts.3.gate_proj.stray_scale", "F32", (1,))
    names = list(tensors)
    rng.shuffle(names)  # shard order is not module order
    return Catalog(
        root=Path("/nonexistent"), tensors={n: tensors[n] for n in names}, files=[], config=CONFIG
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_forked_checks_equal_single_process(monkeypatch, seed):
    cat = _catalog(seed)
    monkeypatch.setattr(resolve_mod, "PARALLEL_CHECK_MIN_MODULES", 256)  # the forked path
    monkeypatch.setenv("CKPT_NO_FORK", "1")
    serial = resolve_catalog(cat)
    serial_issues = [i.model_dump() for i in serial.issues]
    monkeypatch.delenv("CKPT_NO_FORK")
    parallel = resolve_catalog(cat)
    if sys.platform == "linux" and (os.cpu_count() or 1) >= 2:
        assert parallel._pending is not None  # the child really ran
    assert parallel.tensors == serial.tensors
    assert [i.model_dump() for i in parallel.issues] == serial_issues
    assert {i.rule for i in serial.issues} >= {"missing_scale", "scale_shape", "scale_dtype"}


def test_child_failure_is_computed_here(monkeypatch):
    cat = _catalog(3)
    monkeypatch.setattr(resolve_mod, "PARALLEL_CHECK_MIN_MODULES", 256)
    monkeypatch.setenv("CKPT_NO_FORK", "1")
    serial = [i.model_dump() for i in resolve_catalog(cat).issues]
    monkeypatch.delenv("CKPT_NO_FORK")
    monkeypatch.setattr(resolve_mod, "_module_issue_records", lambda *a: 1 / 0)  # child dies
    assert [i.model_dump() for i in resolve_catalog(cat).issues] == serial
