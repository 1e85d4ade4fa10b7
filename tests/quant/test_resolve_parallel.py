"""On a large catalog, ``catalog_findings`` with ``spread=spread_map`` checks modules in a forked
child and the caller; the result is the one a single process computes: same issues, same order."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

from checkpoint_tool import forked
from checkpoint_tool.catalog.catalog import Catalog, TensorEntry
from checkpoint_tool.quant.findings import catalog_findings
from checkpoint_tool.quant.resolve import resolve_catalog

CONFIG = {
    "model_type": "deepseek_v3",
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
        # one shard of layer 0's fused_qkv_a_proj left in float: a packed_mismatch
        "ignored_layers": ["model.layers.0.self_attn.q_a_proj"],
    },
}


def _catalog(seed: int, layers: int = 4, experts: int = 96) -> Catalog:
    """A DeepSeek block-FP8 layout (headers only) with defects sprinkled at random, and the
    down_proj scales of layers 1-3 all in BF16."""
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
                # past layer 0, every down_proj scale in BF16: whole classes of modules with
                # findings, each module checked on its own (the list ``spread`` maps)
                bf16 = roll > 0.99 or (layer > 0 and proj == "down_proj")
                add(f"{m}.weight_scale_inv", "BF16" if bf16 else "F32", scale)
    add("model.layers.0.mlp.experts.3.gate_proj.stray_scale", "F32", (1,))
    names = list(tensors)
    rng.shuffle(names)  # shard order is not module order
    return Catalog(
        root=Path("/nonexistent"), tensors={n: tensors[n] for n in names}, files=[], config=CONFIG
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_spread_findings_equal_single_process(monkeypatch, seed):
    cat = _catalog(seed)
    rc = resolve_catalog(cat)
    serial = [i.model_dump() for i in catalog_findings(cat, rc)]
    monkeypatch.setattr(forked, "SPREAD_MIN_ITEMS", 256)  # the forked path
    ran: list[int] = []
    monkeypatch.setattr(forked, "Forked", _counting(forked.Forked, ran))
    spread = [i.model_dump() for i in catalog_findings(cat, rc, spread=forked.spread_map)]
    if sys.platform == "linux" and (os.cpu_count() or 1) >= 2:
        assert ran  # the child really ran
    assert spread == serial
    assert {i["rule"] for i in serial} >= {
        "missing_scale",
        "scale_shape",
        "scale_dtype",
        "packed_mismatch",
    }


def test_child_failure_is_computed_here(monkeypatch):
    cat = _catalog(3)
    rc = resolve_catalog(cat)
    serial = [i.model_dump() for i in catalog_findings(cat, rc)]
    monkeypatch.setattr(forked, "SPREAD_MIN_ITEMS", 256)
    monkeypatch.setattr(forked, "_map", lambda *a: 1 / 0)  # the child dies
    assert [i.model_dump() for i in catalog_findings(cat, rc, spread=forked.spread_map)] == serial


def test_spread_map_keeps_order_and_falls_back_without_fork(monkeypatch):
    items = list(range(1000))
    monkeypatch.setattr(forked, "SPREAD_MIN_ITEMS", 10)
    assert forked.spread_map(lambda x: (x, str(x)), items) == [(x, str(x)) for x in items]
    monkeypatch.setenv("CKPT_NO_FORK", "1")
    assert forked.spread_map(lambda x: x * 2, items) == [x * 2 for x in items]


def test_findings_leave_the_resolution_as_it_was():
    """Resolution is plain data: the findings step reads it, resolving again gives the same."""
    cat = _catalog(4, layers=1, experts=4)
    rc = resolve_catalog(cat)
    before = dict(rc.tensors)
    catalog_findings(cat, rc)
    assert rc.tensors == before == resolve_catalog(cat).tensors


def _counting(cls: type, ran: list[int]) -> type:
    class Counting(cls):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object) -> None:
            ran.append(1)
            super().__init__(*args)

    return Counting
