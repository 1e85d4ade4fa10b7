"""Every synth preset at TP 1/2/4, planned and executed: lossless, neutral padding, FSE slots.

Source and output are both read with the catalog reader (never through the writer). The expected
bytes of each output tensor are computed from the plan's pieces with the codecs' tensor ops; the
FSE check does not use the plan at all: routed slot ``n_routed + j`` must start with chunk ``j``
of the shared expert (split on dim 1 for ``down_proj`` weights and scales, dim 0 otherwise) and
hold only padding after it.
"""

from __future__ import annotations

import pytest
import torch

from checkpoint_tool.catalog import open_local, read_tensor
from checkpoint_tool.execute import execute_plan
from checkpoint_tool.model import model_facts
from checkpoint_tool.plan.build import plan_for_catalog
from checkpoint_tool.plan.model import PlanOptions
from checkpoint_tool.plan.serialize import plan_compact_json, plan_load
from checkpoint_tool.synth import PRESETS

from .helpers import INT_VIEW, expected_bytes

#: pad fills that mean "1.0" for a scale of this storage dtype (E8M0 as U8/F8_E8M0: 127)
NEUTRAL_SCALE_FILLS = {"F32": "0000803f", "BF16": "803f", "F16": "003c", "F8_E4M3": "38",
                       "U8": "7f", "F8_E8M0": "7f"}  # fmt: skip


def storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes as uint8 with a trailing element-size dim."""
    t = t.contiguous()
    return t.reshape(*t.shape, 1).view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)


@pytest.fixture(scope="module")
def converted(synth_ckpt, tmp_path_factory):
    cache: dict[tuple[str, int, int], tuple] = {}

    def get(preset: str, tp: int, n_shared: int = 1):
        if (preset, tp, n_shared) not in cache:
            src = synth_ckpt(preset) if n_shared == 1 else synth_ckpt(preset, n_shared=n_shared)
            cat = open_local(src)
            plan = plan_for_catalog(cat, PlanOptions(tp=tp, max_shard_size=1_500_000))
            dst = tmp_path_factory.mktemp(f"{preset}-tp{tp}") / "out"
            execute_plan(plan, cat, dst, progress=False, workers=2)
            cache[(preset, tp, n_shared)] = (cat, plan, open_local(dst))
        return cache[(preset, tp, n_shared)]

    return get


CASES = [(p, tp) for p in sorted(PRESETS) for tp in (1, 2, 4)]


@pytest.mark.parametrize(("preset", "tp"), CASES)
def test_every_output_tensor_is_its_source_slice(converted, preset, tp):
    src, plan, out = converted(preset, tp)
    planned = {t.name: t for f in plan.files for t in f.tensors}
    assert set(out.tensors) == set(planned)
    sources: dict[str, torch.Tensor] = {}
    for name, t in planned.items():
        for p in t.pieces:
            if p.source not in sources:
                raw = read_tensor(src, p.source)
                sources[p.source] = raw.view(INT_VIEW[raw.element_size()]) if raw.dim() else raw
        got = storage_bytes(read_tensor(out, name)).numpy().tobytes()
        assert got == expected_bytes(t, sources), f"{preset} tp{tp}: {name}"
    assert len(plan.files) > 1  # resharding exercised (max_shard_size 1.5 MB)


@pytest.mark.parametrize(("preset", "tp"), CASES)
def test_padding_is_zero_weights_and_neutral_scales(converted, preset, tp):
    _, plan, _ = converted(preset, tp)
    names = {t.name for f in plan.files for t in f.tensors}
    for f in plan.files:
        for t in f.tensors:
            for p in t.pieces:
                for pad in p.pads:
                    module, leaf = t.name.rsplit(".", 1)
                    if "scale" in leaf:
                        assert pad.fill == NEUTRAL_SCALE_FILLS[t.dtype], (t.name, pad.fill)
                    elif leaf == "weight_packed" and t.dtype == "I32":
                        # compressed-tensors INT4 words hold q + 8: a symmetric zero is the
                        # nibble 8; with zero points (nibble 0 = -8) the zero word is all zeros
                        asym = f"{module}.weight_zero_point" in names
                        assert pad.fill == ("00000000" if asym else "88888888"), t.name
                    else:
                        assert set(pad.fill) == {"0"}, (t.name, pad.fill)


def _fse_cases() -> list[tuple[str, int, int]]:
    ds = [(p, tp, 1) for p, tp in CASES if PRESETS[p].family == "deepseek_v3"]
    # two shared experts stored as one MLP of width 2 x I: slots n_routed and n_routed + 1
    return [*ds, ("deepseek-v3-fp8", 2, 2), ("quark-mxfp4", 2, 2), ("quark-nvfp4", 4, 2)]


@pytest.mark.parametrize(("preset", "tp", "n_shared"), _fse_cases())
def test_fse_slots_hold_exactly_the_shared_expert_chunks(converted, preset, tp, n_shared):
    src, plan, out = converted(preset, tp, n_shared)
    facts = model_facts(src.config or {}, src.tensors)
    checked = 0
    for layer, fused in plan.fse_layers.items():
        lf = facts.layer(layer)
        if not fused or lf is None:
            continue
        for proj in ("gate", "up", "down"):
            module = lf.shared_module(proj)
            for name in [n for n in src.tensors if n.startswith(module + ".")]:
                suffix = name[len(module) + 1 :]
                shared = storage_bytes(read_tensor(src, name))
                dim = 1 if proj == "down" else 0
                for j in range(lf.n_shared):
                    slot = f"{lf.routed_module(lf.n_routed + j, proj)}.{suffix}"
                    assert slot in out.tensors, f"{preset}: FSE slot {slot} missing"
                    got = storage_bytes(read_tensor(out, slot))
                    if shared.dim() <= 2 and dim == 1:  # 0-d / 1-d scales are not split
                        assert torch.equal(got, shared)
                        continue
                    width = shared.shape[dim] // lf.n_shared
                    chunk = shared.narrow(dim, j * width, width)
                    assert torch.equal(got.narrow(dim, 0, width), chunk), slot
                    rest = got.narrow(dim, width, got.shape[dim] - width)
                    fill = (
                        "00"
                        if "scale" not in suffix
                        else NEUTRAL_SCALE_FILLS[out.tensors[slot].dtype]
                    )
                    assert rest.numel() == 0 or torch.equal(
                        rest,
                        torch.tensor(list(bytes.fromhex(fill)), dtype=torch.uint8).expand_as(rest),
                    ), slot
                    checked += 1
    fse_layers = [k for k, v in plan.fse_layers.items() if v]
    assert bool(checked) == bool(fse_layers)


def test_plan_round_trips_through_json(converted):
    """The executor runs what `ckpt plan --format json` prints."""
    _, plan, _ = converted("quark-hybrid", 2)
    assert plan_load(plan_compact_json(plan)) == plan
