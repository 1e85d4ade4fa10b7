"""Executor features the vllm-sharded layout needs: constant tensors, a stack written as the
engine parameter's shape, the same tensor name on several ranks. Read back with safetensors
and compared with torch references."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from checkpoint_tool.catalog import open_local
from checkpoint_tool.errors import InputError
from checkpoint_tool.execute import execute_plan
from checkpoint_tool.plan.model import OutputFile, OutputTensor, Piece, Plan, PlanOptions, Region


@pytest.fixture
def source(tmp_path):
    g = torch.Generator().manual_seed(3)
    tensors = {f"w{i}": torch.randn(2, 3, generator=g).to(torch.bfloat16) for i in range(4)}
    tensors.update({f"s{i}": torch.rand((), generator=g) + 0.5 for i in range(4)})
    root = tmp_path / "src"
    root.mkdir()
    save_file(tensors, str(root / "model.safetensors"), metadata={"format": "pt"})
    (root / "config.json").write_text(json.dumps({"model_type": "tiny"}))
    return root, tensors


def run(root, tmp_path, files):  # type: ignore[no-untyped-def]
    plan = Plan(ckpt_version="t", source=str(root), recipe="hand", files=files,
                options=PlanOptions(tp=2, layout="vllm-sharded"))  # fmt: skip
    dst = tmp_path / "out"
    execute_plan(plan, open_local(root), dst, progress=False)
    out = []
    for f in files:
        with safe_open(str(dst / f.name), framework="pt") as fh:
            out.append({k: fh.get_tensor(k) for k in fh.keys()})
    return out, dst


def test_constants_stacks_as_parameters_and_per_rank_names(source, tmp_path):
    root, t = source
    w13 = OutputTensor(name="w13", dtype="BF16", shape=[2, 4, 3], combine="stack",
                       pieces=[Piece(source=n) for n in ("w0", "w1", "w2", "w3")])  # fmt: skip
    pairs = OutputTensor(name="pairs", dtype="F32", shape=[2, 2], combine="stack",
                         pieces=[Piece(source=f"s{i}") for i in range(4)])  # fmt: skip
    one = OutputTensor(name="one", dtype="F32", shape=[], pieces=[], fill="0000803f")
    block = OutputTensor(name="ones", dtype="BF16", shape=[3, 2], pieces=[], fill="803f")
    rank1 = OutputTensor(name="w13", dtype="BF16", shape=[2, 2, 3], combine="stack",
                         pieces=[Piece(source=n, slices=[Region(dim=0, start=1, stop=2)])
                                 for n in ("w0", "w1", "w2", "w3")])  # fmt: skip
    files = [
        OutputFile(
            name="model-rank-0-part-0.safetensors", tensors=[w13, pairs, one, block], rank=0
        ),
        OutputFile(name="model-rank-1-part-0.safetensors", tensors=[rank1], rank=1),
    ]
    (r0, r1), dst = run(root, tmp_path, files)
    want = torch.stack([t["w0"], t["w1"], t["w2"], t["w3"]]).reshape(2, 4, 3)
    assert torch.equal(r0["w13"], want)
    assert torch.equal(r0["pairs"], torch.stack([t[f"s{i}"] for i in range(4)]).reshape(2, 2))
    assert r0["one"].shape == () and r0["one"].item() == 1.0
    assert torch.equal(r0["ones"], torch.ones(3, 2, dtype=torch.bfloat16))
    want1 = torch.stack([t[n][1:2] for n in ("w0", "w1", "w2", "w3")]).reshape(2, 2, 3)
    assert torch.equal(r1["w13"], want1)
    assert not (dst / "model.safetensors.index.json").exists()


def test_a_name_twice_on_one_rank_and_bad_fills_are_refused(source, tmp_path):
    root, _ = source
    a = OutputTensor(name="x", dtype="BF16", shape=[2, 3], pieces=[Piece(source="w0")])
    files = [
        OutputFile(name="model-rank-0-part-0.safetensors", tensors=[a], rank=0),
        OutputFile(name="model-rank-0-part-1.safetensors", tensors=[a], rank=0),
    ]
    with pytest.raises(InputError, match="planned in"):
        run(root, tmp_path, files)
    bad = OutputTensor(name="c", dtype="F32", shape=[], pieces=[], fill="803f")
    with pytest.raises(InputError, match="does not fit"):
        run(root, tmp_path, [OutputFile(name="model-rank-0-part-0.safetensors", tensors=[bad])])
