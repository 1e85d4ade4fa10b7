"""The planner's output table: rows as records, the provenance read off them, and the files
``shard_rows`` makes from the columns, each held to the record-by-record answer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_helpers import plan_of

from checkpoint_tool.plan.inputs import plan_inputs
from checkpoint_tool.plan.model import PlanOptions
from checkpoint_tool.plan.outputs import plan_outputs
from checkpoint_tool.plan.sharding import natural_columns, natural_key, shard, shard_rows
from checkpoint_tool.policy import decide_policy
from checkpoint_tool.recipes import auto_recipe

CASES = [("quark-mxfp4", {"tp": 3}), ("deepseek-v3-fp8", {"tp": 2, "fse": "on",
          "target": "vllm-0.33-rocm-aiter-fse"}), ("quark-hybrid", {"tp": 2})]  # fmt: skip


def planned_of(path, **options):
    from checkpoint_tool.catalog import open_catalog

    cat = open_catalog(path)
    opts = PlanOptions(**options)
    decision = decide_policy(cat, tp=opts.tp, fse=opts.fse, target=opts.target)
    return cat, plan_outputs(plan_inputs(cat, decision, auto_recipe(cat), opts))


@pytest.mark.parametrize(("preset", "options"), CASES)
def test_rows_read_back_as_the_same_records(synth_ckpt, preset, options):
    _, planned = planned_of(synth_ckpt(preset), **options)
    rows = planned.tensors
    records = list(rows)
    assert len(records) == len(rows) == len(planned.outputs) > 0
    assert [rows[k] for k in range(len(rows))] == records == rows[:]
    assert rows == records and rows != records[:-1]
    names = planned.outputs.output_names()
    assert [t.name for t in records] == names and len(set(names)) == len(names)
    # every record's pieces come from the source row the table holds
    source = planned.outputs.columns()[0].tolist()
    src_names = planned.outputs.sources.names()
    pairs = zip(records, source, strict=True)
    assert all({p.source for p in t.pieces} == {src_names[s]} for t, s in pairs)


@pytest.mark.parametrize(("preset", "options"), CASES)
def test_provenance_is_the_pieces_sources(synth_ckpt, preset, options):
    _, plan = plan_of(synth_ckpt(preset), **options)
    expected: dict[str, list[str]] = {}
    for f in plan.files:
        for t in f.tensors:
            expected.setdefault(t.pieces[0].source, []).append(t.name)
    prov = plan.provenance
    assert list(prov) == sorted(expected) and len(prov) == len(expected)
    assert {k: sorted(v) for k, v in prov.items()} == {k: sorted(v) for k, v in expected.items()}
    for k, v in list(prov.items())[:20]:
        assert prov[k] == v and k in prov
    assert "no.such.tensor" not in prov
    with pytest.raises(KeyError):
        prov["no.such.tensor"]


@pytest.mark.parametrize(("preset", "options"), CASES)
@pytest.mark.parametrize("max_bytes", [1, 5_000, 200_000, 10**12])
def test_shard_rows_makes_the_files_shard_makes_of_the_records(
    synth_ckpt, preset, options, max_bytes
):
    _, planned = planned_of(synth_ckpt(preset), **options)
    by_rows = shard_rows(planned.outputs, max_bytes)
    by_records = shard(list(planned.tensors), max_bytes)
    assert [(f.name, f.nbytes, len(f.tensors)) for f in by_rows] == [
        (f.name, f.nbytes, len(f.tensors)) for f in by_records
    ]
    assert all(a.tensors == b.tensors for a, b in zip(by_rows, by_records, strict=True))


names = st.lists(
    st.text(alphabet="ab.0123456789_x", min_size=0, max_size=12), min_size=1, max_size=60
)


@settings(max_examples=300, deadline=None)
@given(names)
def test_natural_columns_sort_as_natural_key(batch):
    cols = natural_columns(batch)
    assert cols is not None
    order = np.lexsort((np.arange(len(batch)), *reversed(cols)))
    assert [batch[k] for k in order] == sorted(batch, key=natural_key)


def test_natural_columns_decline_what_they_cannot_hold():
    assert natural_columns(["a\0b"]) is None
    assert natural_columns(["x" + "9" * 19]) is None
