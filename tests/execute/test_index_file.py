"""The streamed index is byte for byte ``json.dumps(doc, indent=2) + "\\n"`` of the whole
weight_map, sorted as ``sorted`` sorts the names (non-ASCII, escapes, NULs, lone surrogates)."""

from __future__ import annotations

import json
import random

import pytest

from checkpoint_tool.catalog.safetensors_format import tensor_nbytes
from checkpoint_tool.execute import index_file
from checkpoint_tool.execute.index_file import index_chunks
from checkpoint_tool.execute.writer import write_chunks_atomic
from checkpoint_tool.plan.model import OutputFile, OutputTensor, Plan, PlanOptions

#: names whose UTF-8 bytes, NUL padding or JSON escapes could sort or spell differently
ODD = ["a", "a\x00", "a\x00b", "b", "é", "ü.weight", "\ud800x", "\U0001f600", 'q"uote', "back\\s",
       "tab\t", "Z", "a\x01", "\x7f", "\u00e9\u0301", "ab", "abc"]  # fmt: skip


def _plan(files: list[list[str]]) -> Plan:
    return Plan(
        ckpt_version="0",
        source="s",
        recipe="r",
        options=PlanOptions(),
        files=[
            OutputFile(
                name=f"model-{k:05d}.safetensors",
                tensors=[
                    OutputTensor(name=n, dtype="BF16", shape=[len(n) + 1, 3], pieces=[])
                    for n in names
                ],
            )
            for k, names in enumerate(files)
        ],
    )


def _reference(plan: Plan) -> bytes:
    weight_map = {t.name: f.name for f in plan.files for t in f.tensors}
    total = sum(tensor_nbytes(t.dtype, tuple(t.shape)) for t in plan.tensors())
    doc = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    return (json.dumps(doc, indent=2) + "\n").encode()


@pytest.mark.parametrize("block", [1, 3, 4096])
def test_same_bytes_as_json_dumps_of_the_sorted_map(monkeypatch, block):
    monkeypatch.setattr(index_file, "BLOCK", block)
    names = [*ODD, *(f"model.layers.{k}.mlp.experts.{k % 7}.w" for k in range(40))]
    random.Random(3).shuffle(names)
    plan = _plan([names[:20], [], names[20:21], names[21:], []])
    assert b"".join(index_chunks(plan)) == _reference(plan)


@pytest.mark.parametrize("files", [[], [[]], [[], []]], ids=["no-files", "empty", "empties"])
def test_an_empty_weight_map(files):
    plan = _plan(files)
    assert b"".join(index_chunks(plan)) == _reference(plan)


def test_written_atomically_with_its_size_and_hash(tmp_path):
    import hashlib

    plan = _plan([ODD[:5], ODD[5:]])
    size, sha = write_chunks_atomic(tmp_path / "index.json", index_chunks(plan), durable=False)
    data = (tmp_path / "index.json").read_bytes()
    assert data == _reference(plan)
    assert (size, sha) == (len(data), hashlib.sha256(data).hexdigest())


def test_a_failing_stream_leaves_no_file(tmp_path):
    def chunks():
        yield b"{"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_chunks_atomic(tmp_path / "x.json", chunks(), durable=False)
    assert list(tmp_path.iterdir()) == []
