"""The planner's output table: rows as records, the provenance read off them, and the files
``shard_rows`` makes from the columns, each held to the record-by-record answer."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_helpers import plan_of

from checkpoint_tool.plan.inputs import plan_inputs
from checkpoint_tool.plan.model import PlanOptions
from checkpoint_tool.plan.name_parts import NameParts
from checkpoint_tool.plan.outputs import plan_outputs
from checkpoint_tool.plan.sharding import group_key, group_rule, natural_key, shard, shard_rows
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


def test_names_parsed_one_by_one_make_the_same_files(synth_ckpt, monkeypatch):
    _, planned = planned_of(synth_ckpt("quark-mxfp4"), tp=3)
    columns = shard_rows(planned.outputs, 5_000)
    monkeypatch.setattr(NameParts, "of", classmethod(lambda cls, blocks: None))
    assert shard_rows(planned.outputs, 5_000) == columns


names = st.lists(
    st.text(alphabet="ab.0123456789_x", min_size=0, max_size=12), min_size=1, max_size=60
)
#: non-ASCII names take the regex path; "٣" is a digit to ``\d`` and ``int``
unicode_names = st.lists(
    st.text(alphabet="a.09_é٣", min_size=0, max_size=10), min_size=1, max_size=40
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(names, unicode_names))
def test_natural_columns_sort_as_natural_key(batch):
    parts = NameParts.of(lambda: [batch[:7], batch[7:]])
    assert parts is not None
    order = np.lexsort((np.arange(len(batch)), *reversed(parts.natural_columns())))
    assert [batch[k] for k in order] == sorted(batch, key=natural_key)


layered = st.lists(
    st.sampled_from(["model.", "", "x.", "mtp.", "model.mtp.", "embed.", "a.layers."])
    .flatmap(lambda p: st.tuples(st.just(p), st.sampled_from(["layers.", "mtp.", "q", ""])))
    .flatmap(lambda t: st.tuples(st.just(t[0] + t[1]), st.integers(0, 120), st.sampled_from(
        [".w1", ".x.layers.4.y", "", ".embed", "5.z"]))),
    min_size=1, max_size=40,
).map(lambda items: [f"{a}{n}{b}" for a, n, b in items])  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(layered)
def test_group_codes_are_group_key(batch):
    parts = NameParts.of(lambda: [batch[:7], batch[7:]])
    assert parts is not None
    codes = parts.codes({p: group_rule(p) for p in parts.patterns}).tolist()
    assert codes == [(a << 32) + b for a, b in map(group_key, batch)]


def test_names_the_columns_cannot_hold_are_declined():
    assert NameParts.of(lambda: [["a\0b"]]) is None
    assert NameParts.of(lambda: [["x" + "9" * 19]]) is None
    assert NameParts.of(lambda: [["é" + "9" * 19]]) is None


@pytest.mark.parametrize(
    "preset", ["deepseek-v3-fp8", "quark-hybrid", "deepseek-v4", "qwen3.5-moe-mxfp4", "qwen2-moe"]
)
def test_expert_columns_name_the_modules_expert_modules_names(synth_ckpt, preset):
    """The one pass over module names finds exactly the modules the facts spell out."""
    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.plan.experts import expert_columns, expert_modules

    cat = open_catalog(synth_ckpt(preset))
    decision = decide_policy(cat)
    cols = decision.resolved.columns
    got = expert_columns(decision.facts, cols)
    spelled = expert_modules(decision.facts)
    assert len(spelled) > 0
    for k, module in enumerate(cols.module_names):
        part = spelled.get(module)
        kind = int(got.kind_of_module[k])
        if part is None:
            assert kind == -1, module
            continue
        rep = got.kinds[kind]
        assert (rep.layer, rep.kind, rep.proj, rep.fused_3d) == (
            part.layer, part.kind, part.proj, part.fused_3d
        ), module  # fmt: skip
        if part.kind == "shared" or part.fused_3d:
            assert got.parts[k] == part


@given(st.text(st.characters(exclude_characters="\n"), max_size=20))
def test_plain_names_are_what_json_writes_as_they_are(text):
    """A name goes into the plan templates unescaped exactly when JSON would not escape it
    (DEL too is escaped by the compact spelling's peers, so it is never plain)."""
    from checkpoint_tool.plan.serialize import _plain

    assert _plain(text) == (json.dumps(text) == f'"{text}"' and "\x7f" not in text)
