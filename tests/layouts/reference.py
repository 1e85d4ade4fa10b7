"""Independent reference for vllm-sharded outputs: put the per-rank tensors back together.

Shares no code with the planner: where each DeepSeek checkpoint tensor goes is written out
here by hand (from vLLM's deepseek_v2.py), the rank tensors are read with safetensors and put
back together with torch (``cat`` over ranks along the split dim, slices of merged shards,
halves of ``w13``), padding is stripped and checked (zero weights, 1.0 scales), and the result is
compared byte for byte with the source tensor read through the catalog reader.

Only the state-dict key comes from ``KeyResolver`` (tested on its own against hand-written
names in ``test_target_spec.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors import safe_open

from checkpoint_tool.catalog import read_tensor
from checkpoint_tool.targets import load_spec
from checkpoint_tool.targets.keys import KeyResolver

#: checkpoint module (below ``model.layers.L.``) -> (vLLM module, shard index, shards, parallel)
LINEARS = {
    "self_attn.q_a_proj": ("self_attn.fused_qkv_a_proj", 0,
                           ("self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"), "replicated"),
    "self_attn.kv_a_proj_with_mqa": ("self_attn.fused_qkv_a_proj", 1,
                                     ("self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"),
                                     "replicated"),
    "self_attn.q_b_proj": ("self_attn.q_b_proj", 0, ("self_attn.q_b_proj",), "column"),
    "self_attn.kv_b_proj": ("self_attn.kv_b_proj", 0, ("self_attn.kv_b_proj",), "column"),
    "self_attn.o_proj": ("self_attn.o_proj", 0, ("self_attn.o_proj",), "row"),
    "mlp.gate_proj": ("mlp.gate_up_proj", 0, ("mlp.gate_proj", "mlp.up_proj"), "column"),
    "mlp.up_proj": ("mlp.gate_up_proj", 1, ("mlp.gate_proj", "mlp.up_proj"), "column"),
    "mlp.down_proj": ("mlp.down_proj", 0, ("mlp.down_proj",), "row"),
    "mlp.shared_experts.gate_proj": ("mlp.shared_experts.gate_up_proj", 0,
                                     ("mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"),
                                     "column"),
    "mlp.shared_experts.up_proj": ("mlp.shared_experts.gate_up_proj", 1,
                                   ("mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"),
                                   "column"),
    "mlp.shared_experts.down_proj": ("mlp.shared_experts.down_proj", 0,
                                     ("mlp.shared_experts.down_proj",), "row"),
    "mlp.gate": ("mlp.gate", 0, ("mlp.gate",), "replicated"),
}  # fmt: skip
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)\.([a-z_0-9]+)$")
_EXPERT = re.compile(r"^mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)$")
_SHARED = re.compile(r"^mlp\.shared_experts\.(gate_proj|up_proj|down_proj)$")


def load_ranks(dst: Path, tp: int) -> list[dict[str, torch.Tensor]]:
    """Every rank's tensors, read with safetensors (never with ckpt's writer or reader)."""
    ranks = []
    for r in range(tp):
        tensors: dict[str, torch.Tensor] = {}
        for f in sorted(dst.glob(f"model-rank-{r}-part-*.safetensors")):
            with safe_open(str(f), framework="pt") as fh:
                for k in fh.keys():
                    assert k not in tensors, f"{k} twice on rank {r}"
                    tensors[k] = fh.get_tensor(k)
        ranks.append(tensors)
    return ranks


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """Raw bytes with a trailing element-size dim (compare storage, never values)."""
    t = t.contiguous()
    return t.reshape(*t.shape, 1).view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)


def is_neutral(t: torch.Tensor, suffix: str) -> bool:
    """Padding content: zero weights, scales of value 1.0 (E8M0 byte 127)."""
    if t.numel() == 0:
        return True
    if suffix == "weight":
        return bool((as_bytes(t) == 0).all())
    if t.dtype == torch.uint8:  # MXFP4 E8M0 scales
        return bool((t == 127).all())
    return bool((t.to(torch.float32) == 1.0).all())


def same_prefix(whole: torch.Tensor, source: torch.Tensor, dim: int, suffix: str) -> str | None:
    """None when ``whole`` is ``source`` followed by neutral padding along ``dim``."""
    n = source.shape[dim] if source.dim() else 0
    if whole.shape[dim] < n:
        return f"reassembled {list(whole.shape)} shorter than source {list(source.shape)}"
    head, tail = whole.narrow(dim, 0, n), whole.narrow(dim, n, whole.shape[dim] - n)
    if head.dtype != source.dtype or not torch.equal(as_bytes(head), as_bytes(source)):
        return "bytes differ from the source"
    if not is_neutral(tail, suffix):
        return "padding is not zero weights / 1.0 scales"
    return None


class Reassembler:
    """Checks one source tensor against the rank files (``check`` returns a problem or None)."""

    def __init__(self, cat, plan, dst: Path, tp: int) -> None:  # type: ignore[no-untyped-def]
        self.cat, self.plan, self.tp = cat, plan, tp
        self.ranks = load_ranks(dst, tp)
        self.keys = KeyResolver(load_spec("deepseek_v3"))
        self.config = cat.config
        self.dropped = {d.name: d.rule for d in plan.dropped}

    def key(self, module: str, param: str) -> str:
        return self.keys.key(module, param)

    def rank_tensors(self, key: str) -> list[torch.Tensor]:
        missing = [r for r in range(self.tp) if key not in self.ranks[r]]
        assert not missing, f"{key} missing on rank(s) {missing}"
        return [self.ranks[r][key] for r in range(self.tp)]

    def check(self, name: str) -> str | None:
        source = read_tensor(self.cat, name)
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            parts = self.rank_tensors(self.key(name.rsplit(".", 1)[0], "weight"))
            return same_prefix(torch.cat(parts, 0), source, 0, "weight")
        m = _LAYER.match(name)
        if m is None:  # model.norm.weight
            module, suffix = name.rsplit(".", 1)
            return self.replicated(self.key(module, suffix), source)
        layer, module, suffix = int(m.group(1)), m.group(2), m.group(3)
        prefix = f"model.layers.{layer}"
        if suffix == "e_score_correction_bias" or module.endswith("layernorm"):
            return self.replicated(self.key(f"{prefix}.{module}", suffix), source)
        e = _EXPERT.match(module)
        if e is not None:
            return self.expert(prefix, int(e.group(1)), e.group(2), suffix, source, name)
        s = _SHARED.match(module)
        if s is not None and self.plan.fse_layers.get(layer, False):
            return self.fse_shared(prefix, layer, s.group(1), suffix, source, name)
        if module in LINEARS:
            return self.linear(prefix, module, suffix, source)
        return f"no reference mapping for {name}"

    def replicated(self, key: str, source: torch.Tensor) -> str | None:
        for t in self.rank_tensors(key):
            if t.dtype != source.dtype or not torch.equal(as_bytes(t), as_bytes(source)):
                return f"{key} differs from the source on some rank"
        return None

    def linear(self, prefix: str, module: str, suffix: str, source: torch.Tensor) -> str | None:
        vllm, index, shards, parallel = LINEARS[module]
        parts = self.rank_tensors(self.key(f"{prefix}.{vllm}", suffix))
        if source.numel() == 1:  # per-tensor value: one entry per shard
            bad = [r for r, t in enumerate(parts) if not torch.equal(
                as_bytes(t.reshape(-1)[index]), as_bytes(source.reshape(()))
            )]  # fmt: skip
            return f"per-shard value differs on ranks {bad}" if bad else None
        if parallel == "replicated":
            sizes = [read_tensor(self.cat, f"{prefix}.{s}.{suffix}").shape[0] for s in shards]
            start = sum(sizes[:index])
            pieces = [t.narrow(0, start, sizes[index]) for t in parts]
            return self.replicated_pieces(pieces, source)
        if parallel == "row":
            if source.dim() == 1:  # per-output-channel scale of a row-split linear
                return self.replicated_pieces(parts, source)
            return same_prefix(torch.cat(parts, source.dim() - 1), source, -1, suffix)
        rows = parts[0].shape[0] // len(shards)  # merged shards are equal-sized here
        pieces = [t.narrow(0, index * rows, rows) for t in parts]
        return same_prefix(torch.cat(pieces, 0), source, 0, suffix)

    def replicated_pieces(self, pieces: list[torch.Tensor], source: torch.Tensor) -> str | None:
        for p in pieces:
            if p.dtype != source.dtype or not torch.equal(as_bytes(p), as_bytes(source)):
                return "replicated piece differs from the source"
        return None

    def expert(
        self, prefix: str, slot: int, proj: str, suffix: str, source: torch.Tensor, name: str
    ) -> str | None:
        moe = f"{prefix}.mlp.experts.routed_experts"
        if proj == "down_proj":
            parts = [t[slot] for t in self.rank_tensors(self.key(moe, f"w2_{suffix}"))]
            if source.numel() == 1 or source.dim() == 1:  # per-tensor / per-channel [H]
                return self.replicated_pieces([p.reshape(source.shape) for p in parts], source)
            return same_prefix(torch.cat(parts, -1), source, -1, suffix)
        parts = [t[slot] for t in self.rank_tensors(self.key(moe, f"w13_{suffix}"))]
        half = 0 if proj == "gate_proj" else 1
        if source.numel() == 1:
            if parts[0].dim() == 0:  # one value per expert: the up value is written
                if proj == "gate_proj":
                    rule = self.dropped.get(name)
                    return None if rule else f"gate value of a per-expert scale not dropped: {name}"
                return self.replicated_pieces([p.reshape(()) for p in parts], source.reshape(()))
            return self.replicated_pieces([p[half].reshape(()) for p in parts], source.reshape(()))
        rows = parts[0].shape[0] // 2
        pieces = [p.narrow(0, half * rows, rows) for p in parts]
        return same_prefix(torch.cat(pieces, 0), source, 0, suffix)

    def fse_shared(
        self, prefix: str, layer: int, proj: str, suffix: str, source: torch.Tensor, name: str
    ) -> str | None:
        """Shared expert of an FSE layer: chunk j sits in routed slot n_routed + j."""
        n_routed = int(self.config["n_routed_experts"])
        n_shared = int(self.config["n_shared_experts"])
        dim = -1 if (proj == "down_proj" and source.dim() == 2) else 0
        for j in range(n_shared):
            if source.numel() == 1:
                chunk = source
            else:
                size = source.shape[dim] // n_shared
                chunk = source.narrow(dim, j * size, size)
            problem = self.expert(prefix, n_routed + j, proj, suffix, chunk, name)
            if problem:
                return f"FSE slot {n_routed + j}: {problem}"
        return None
