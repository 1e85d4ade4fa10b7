"""Tiny hand-made checkpoints and plans for executor tests, and an independent reference.

The source is written with the ``safetensors`` library (not our writer); outputs are read back
with the catalog reader and ``safetensors.safe_open``; the expected bytes of each output tensor
come from the in-memory source tensors through the codecs' ``apply_region``/``apply_pad`` and
``torch.cat``/``torch.stack`` — a path that shares no code with ``execute.ops``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from checkpoint_tool.catalog import open_local, read_tensor
from checkpoint_tool.plan.model import (
    DroppedTensor,
    OutputFile,
    OutputTensor,
    Pad,
    Piece,
    Plan,
    PlanOptions,
    Region,
)
from checkpoint_tool.quant.codecs import apply_pad, apply_region

#: same-size integer dtype per storage dtype: the reference moves bytes, never values
INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

E, INTER, H = 4, 8, 12  # experts, intermediate, hidden (tiny)


def random_bytes(gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Fresh random bits of any dtype (FP8 NaN patterns included: we only move bytes)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    n = 1
    for s in shape:
        n *= s
    raw = torch.randint(0, 256, (n * itemsize,), dtype=torch.uint8, generator=gen)
    return raw.view(dtype).reshape(shape)


def tiny_moe_tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    """A small MoE-like source: BF16 embeddings, FP8 experts + F32 block scales, packed FP4,
    a fused 3-D BF16 expert parameter, a 0-d F32 scale and an F32 router bias."""
    g = torch.Generator().manual_seed(seed)
    t: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": random_bytes(g, (16, H), torch.bfloat16),
        "model.norm.weight": random_bytes(g, (H,), torch.bfloat16),
        "model.layers.0.mlp.gate.e_score_correction_bias": random_bytes(g, (E,), torch.float32),
        "model.layers.0.mlp.experts.gate_up_proj": random_bytes(
            g, (E, 2 * INTER, H), torch.bfloat16
        ),
        "model.layers.0.mlp.shared_experts.down_proj.weight_scale_2": random_bytes(
            g, (), torch.float32
        ),
    }
    for e in range(E):
        for proj, shape in (
            ("gate_proj", (INTER, H)),
            ("up_proj", (INTER, H)),
            ("down_proj", (H, INTER)),
        ):
            p = f"model.layers.1.mlp.experts.{e}.{proj}"
            t[f"{p}.weight"] = random_bytes(g, shape, torch.float8_e4m3fn)
            t[f"{p}.weight_scale_inv"] = random_bytes(
                g, (shape[0] // 4, shape[1] // 4), torch.float32
            )
    t["model.layers.1.mlp.shared_experts.down_proj.weight"] = random_bytes(
        g, (H, INTER // 2), torch.uint8
    )
    return t


def write_source(root: Path, tensors: dict[str, torch.Tensor], n_shards: int = 2) -> Path:
    """Write ``tensors`` as ``n_shards`` shards + index + config + side files (safetensors lib)."""
    root.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    weight_map = {}
    for s in range(n_shards):
        fname = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: tensors[n].contiguous() for n in names[s::n_shards]}
        save_file(part, root / fname, metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    (root / "config.json").write_text(json.dumps({"model_type": "tiny", "hidden_size": H}))
    (root / "tokenizer.json").write_text(json.dumps({"vocab": ["a", "b"]}))
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "chat_template.jinja").write_text("{{ messages }}")
    return root


def tiny_plan(source: Path, *, tp: int = 1) -> Plan:
    """A hand-made plan that exercises every op the executor knows, across three files."""
    L1 = "model.layers.1.mlp"
    out_a = [
        OutputTensor(name="model.embed_tokens.weight", dtype="BF16", shape=[16, H],
                     pieces=[Piece(source="model.embed_tokens.weight")]),
        OutputTensor(name="model.norm.weight", dtype="BF16", shape=[H],
                     pieces=[Piece(source="model.norm.weight")]),
        # rows of a fused 3-D parameter, squeezed: [1, INTER, H] -> [INTER, H]
        OutputTensor(name="model.layers.0.mlp.experts.1.up_proj.weight", dtype="BF16",
                     shape=[INTER, H], pieces=[Piece(source="model.layers.0.mlp.experts.gate_up_proj",
                     slices=[Region(dim=0, start=1, stop=2), Region(dim=1, start=INTER, stop=2 * INTER)])]),
        OutputTensor(name="model.layers.0.mlp.gate.e_score_correction_bias", dtype="F32",
                     shape=[E + 1], pieces=[Piece(source="model.layers.0.mlp.gate.e_score_correction_bias",
                     pads=[Pad(dim=0, amount=1, fill="0000803f")])]),
        OutputTensor(name="scalar", dtype="F32", shape=[],
                     pieces=[Piece(source="model.layers.0.mlp.shared_experts.down_proj.weight_scale_2")]),
    ]  # fmt: skip
    out_b = []
    for e in range(E):
        p = f"{L1}.experts.{e}"
        out_b += [
            # TP-sliced rows of gate (dim-0 region: one contiguous range), padded with zero rows
            OutputTensor(name=f"{p}.gate_proj.weight", dtype="F8_E4M3", shape=[INTER // 2 + 2, H],
                         pieces=[Piece(source=f"{p}.gate_proj.weight",
                                       slices=[Region(dim=0, start=INTER // 2, stop=INTER)],
                                       pads=[Pad(dim=0, amount=2, fill="00")])]),
            # inner-dim region of down (gathered rows), padded on dim 1
            OutputTensor(name=f"{p}.down_proj.weight", dtype="F8_E4M3", shape=[H, INTER // 2 + 4],
                         pieces=[Piece(source=f"{p}.down_proj.weight",
                                       slices=[Region(dim=1, start=0, stop=INTER // 2)],
                                       pads=[Pad(dim=1, amount=4, fill="00")])]),
            # scales: inner region + neutral F32 1.0 pad on both dims
            OutputTensor(name=f"{p}.down_proj.weight_scale_inv", dtype="F32", shape=[H // 4 + 1, 2],
                         pieces=[Piece(source=f"{p}.down_proj.weight_scale_inv",
                                       slices=[Region(dim=-1, start=1, stop=2)],
                                       pads=[Pad(dim=1, amount=1, fill="0000803f"),
                                             Pad(dim=0, amount=1, fill="0000803f")])]),
        ]  # fmt: skip
    out_c = [
        # w13 of one rank: [gate rows | up rows] (concat axis 0)
        OutputTensor(name=f"{L1}.experts.0.gate_up_proj.weight", dtype="F8_E4M3", shape=[INTER, H],
                     combine="concat", axis=0,
                     pieces=[Piece(source=f"{L1}.experts.0.gate_proj.weight",
                                   slices=[Region(dim=0, start=0, stop=INTER // 2)]),
                             Piece(source=f"{L1}.experts.0.up_proj.weight",
                                   slices=[Region(dim=0, start=0, stop=INTER // 2)])]),
        # experts stacked into a 3-D parameter (stack axis 0)
        OutputTensor(name=f"{L1}.experts.w2_weight", dtype="F8_E4M3", shape=[E, H, INTER],
                     combine="stack", axis=0,
                     pieces=[Piece(source=f"{L1}.experts.{e}.down_proj.weight") for e in range(E)]),
        # concat on an inner axis
        OutputTensor(name=f"{L1}.experts.gate_up_cols", dtype="F8_E4M3", shape=[INTER, 2 * H],
                     combine="concat", axis=1,
                     pieces=[Piece(source=f"{L1}.experts.1.gate_proj.weight"),
                             Piece(source=f"{L1}.experts.1.up_proj.weight")]),
        # stack on an inner axis, with regions
        OutputTensor(name=f"{L1}.experts.stack1", dtype="F32", shape=[INTER // 4, E, 2],
                     combine="stack", axis=1,
                     pieces=[Piece(source=f"{L1}.experts.{e}.gate_proj.weight_scale_inv",
                                   slices=[Region(dim=1, start=1, stop=3)]) for e in range(E)]),
        # packed FP4 bytes declared as F4 (logical last dim = 2x bytes), column slice + pad
        OutputTensor(name=f"{L1}.shared_experts.down_proj.weight", dtype="F4", shape=[H, 6],
                     pieces=[Piece(source=f"{L1}.shared_experts.down_proj.weight",
                                   slices=[Region(dim=1, start=2, stop=4)],
                                   pads=[Pad(dim=1, amount=1, fill="00")])]),
        # stack of 0-d scalars into [2]
        OutputTensor(name="scalars", dtype="F32", shape=[2], combine="stack", axis=0,
                     pieces=[Piece(source="model.layers.0.mlp.shared_experts.down_proj.weight_scale_2")] * 2),
    ]  # fmt: skip
    files = [
        OutputFile(name="model-00001-of-00003.safetensors", tensors=out_a),
        OutputFile(name="model-00002-of-00003.safetensors", tensors=out_b),
        OutputFile(name="model-00003-of-00003.safetensors", tensors=out_c),
    ]
    return Plan(
        ckpt_version="test",
        source=str(source),
        recipe="hand-made",
        options=PlanOptions(tp=tp),
        files=files,
        dropped=[DroppedTensor(name="x", rule="test", reason="not in the plan")],
        config={"model_type": "tiny", "hidden_size": H, "ckpt_test": True},
        side_files=["tokenizer.json", "sub/chat_template.jinja", "config.json"],
    )


def _as_int(t: torch.Tensor) -> torch.Tensor:
    return (
        t.contiguous().view(INT_VIEW[t.element_size()])
        if t.dim()
        else t.reshape(1).view(INT_VIEW[t.element_size()]).reshape(())
    )


def expected_bytes(out: OutputTensor, tensors: dict[str, torch.Tensor]) -> bytes:
    """The bytes an output tensor must have, from the in-memory source tensors."""
    parts = []
    for piece in out.pieces:
        t = _as_int(tensors[piece.source])
        for region in piece.slices:
            t = apply_region(t, region)
        for pad in piece.pads:
            t = apply_pad(t, pad)
        parts.append(t)
    if out.combine == "single":
        result = parts[0]
    elif out.combine == "concat":
        result = torch.cat(parts, dim=out.axis)
    else:
        result = torch.stack(parts, dim=out.axis)
    return (
        result.contiguous().view(torch.uint8).numpy().tobytes()
        if result.dim()
        else (result.reshape(1).view(torch.uint8).numpy().tobytes())
    )


def read_output(dst: Path) -> dict[str, bytes]:
    """Every tensor of DST as raw bytes, through the catalog reader (header-checked)."""
    cat = open_local(dst)
    return {
        name: read_tensor(cat, entry).contiguous().view(torch.uint8).numpy().tobytes()
        if entry.shape
        else read_tensor(cat, entry).reshape(1).view(torch.uint8).numpy().tobytes()
        for name, entry in cat.tensors.items()
    }


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under root (hidden ones included) -> its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
