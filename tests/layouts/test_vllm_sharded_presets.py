"""Every DeepSeek-V3 synth preset at TP 1/2/4 through ``--layout vllm-sharded``, end to end.

For each conversion: the rank files hold exactly the keys the vllm-0.33 spec lists, with the
spec's per-rank shapes (``expected.py``, evaluated from the written config.json); every source
tensor is either put back together byte for byte from the rank files (``reference.py``: cat
over ranks, merged-shard slices, w13 halves, padding stripped and checked neutral) or dropped
by a named rule; files are named ``model-rank-{r}-part-{p}.safetensors`` and there is no index.
"""

from __future__ import annotations

import json
import re

import pytest
from safetensors import safe_open

from checkpoint_tool.catalog.safetensors_format import storage_shape

from .conftest import SHARDED_PRESETS
from .expected import expected_params
from .reference import Reassembler

CASES = [(p, tp) for p in SHARDED_PRESETS for tp in (1, 2, 4)]
ALLOWED_DROPS = {"vllm_sharded_mtp", "vllm_sharded_per_expert"}
LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def rank_shapes(dst, tp: int) -> list[dict[str, tuple[int, ...]]]:
    out = []
    for r in range(tp):
        shapes: dict[str, tuple[int, ...]] = {}
        for f in sorted(dst.glob(f"model-rank-{r}-part-*.safetensors")):
            with safe_open(str(f), framework="pt") as fh:
                for k in fh.keys():
                    s = fh.get_slice(k)
                    shapes[k] = storage_shape(s.get_dtype(), tuple(s.get_shape()))
        out.append(shapes)
    return out


@pytest.mark.parametrize(("preset", "tp"), CASES)
def test_names_and_shapes_equal_the_spec(sharded, preset, tp):
    cat, plan, dst = sharded(preset, tp)
    want = expected_params(cat, plan, dst)
    for r, got in enumerate(rank_shapes(dst, tp)):
        assert set(got) == set(want), (
            f"rank {r}: missing {sorted(set(want) - set(got))[:5]}, "
            f"unexpected {sorted(set(got) - set(want))[:5]}"
        )
        wrong = {k: (got[k], want[k]) for k in want if tuple(got[k]) != tuple(want[k])}
        assert not wrong, f"rank {r}: shapes differ (got, spec): {dict(list(wrong.items())[:5])}"


@pytest.mark.parametrize(("preset", "tp"), CASES)
def test_rank_tensors_reassemble_to_the_source(sharded, preset, tp):
    cat, plan, dst = sharded(preset, tp)
    ref = Reassembler(cat, plan, dst, tp)
    dropped = {d.name: d.rule for d in plan.dropped}
    assert set(dropped.values()) <= ALLOWED_DROPS
    problems = {}
    for name in sorted(cat.tensors):
        if name in dropped:
            continue
        problem = ref.check(name)
        if problem:
            problems[name] = problem
    assert not problems, dict(list(problems.items())[:5])


@pytest.mark.parametrize("preset", SHARDED_PRESETS)
def test_files_manifest_and_drops(sharded, preset):
    cat, plan, dst = sharded(preset, 2)
    names = sorted(p.name for p in dst.glob("*.safetensors"))
    assert names == ["model-rank-0-part-0.safetensors", "model-rank-1-part-0.safetensors"]
    assert not (dst / "model.safetensors.index.json").exists()
    manifest = json.loads((dst / "ckpt-manifest.json").read_text())
    assert sorted(f["name"] for f in manifest["files"]) == names
    assert (dst / "config.json").exists() and (dst / "tokenizer_config.json").exists()
    config = json.loads((dst / "config.json").read_text())
    n_layers = config["num_hidden_layers"]
    mtp = [d for d in plan.dropped if d.rule == "vllm_sharded_mtp"]
    mtp_sources = {n for n in cat.tensors if (m := LAYER.match(n)) and int(m.group(1)) >= n_layers}
    assert {d.name for d in mtp} == mtp_sources
    # every source tensor is used by some piece or dropped, never both
    used = {p.source for f in plan.files for t in f.tensors for p in t.pieces}
    dropped = {d.name for d in plan.dropped}
    assert used | dropped == set(cat.tensors)
    assert not used & dropped
    assert set(plan.provenance) == used
    names = {t.name for f in plan.files for t in f.tensors}
    assert all(set(outs) <= names for outs in plan.provenance.values())


def test_parts_split_at_max_shard_size(sharded):
    _cat, plan, dst = sharded("quark-mxfp4", 2, max_shard_size=150_000)
    for r in range(2):
        parts = sorted(
            dst.glob(f"model-rank-{r}-part-*.safetensors"),
            key=lambda p: int(p.stem.rsplit("-", 1)[1]),  # part 10 after part 9
        )
        assert len(parts) > 2
        assert [p.name for p in parts] == [
            f"model-rank-{r}-part-{i}.safetensors" for i in range(len(parts))
        ]
    for f in plan.files:
        assert f.nbytes <= 150_000 or len(f.tensors) == 1
    assert plan.summary.bytes_per_rank == [
        sum(f.nbytes for f in plan.files if f.rank == r) for r in range(2)
    ]
