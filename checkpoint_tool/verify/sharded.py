"""Runtime layers of a ``vllm-sharded`` output: each TP rank's experts as the engine holds them.

The per-rank files (``model-rank-{r}-part-{p}.safetensors``) hold vLLM's parameters: routed
experts stacked as ``w13_*`` ``[E, 2 I_r, H]`` / ``w2_*`` ``[E, H, I_r]`` (fused shared slots
included, ``E = n_routed + n_fused``), read back per expert slot by
``targets.sharded_read.read_sharded_moe_layer``; separate shared experts as the merged
``shared_experts.gate_up_proj`` (``[gate_r | up_r]`` rows) and ``down_proj``; the router
replicated on every rank. Keys come from the engine target spec (``targets.keys``), schemes
from the output's config.json under vLLM's name matching, by the HF module names the
parameters were built from.

The numeric check runs the ranks' slices as they are (``prepare_moe([rank layers])``) and sums
their outputs: nothing is re-sliced, so what is checked is what each rank would load.

Example::

    view = ShardedView.open("/out/r1-tp2", tp=2)
    ranks, slot_of = view.rank_layers(3, experts=[5, 17], router=view.router(3))
    len(ranks), ranks[1].experts[0].intermediate      # (2, 1024)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from checkpoint_tool.errors import InputError
from checkpoint_tool.layers.view import ConfigView, Router, split_gate_up
from checkpoint_tool.model import ModelFacts, MoeLayerFacts, model_facts
from checkpoint_tool.quant.resolve import resolve_tensor
from checkpoint_tool.quant.roles import CODEC_ROLES, role_of_suffix, suffixes_of
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights, Projection
from checkpoint_tool.targets import DEFAULT_TARGET, load_spec
from checkpoint_tool.targets.keys import KeyResolver
from checkpoint_tool.targets.sharded_read import rank_files

#: vLLM parameter suffix -> runtime role: the codec's roles (``quant.roles``) less DeepSeek-V4's
#: bare ``scale``, a checkpoint name that no vLLM parameter of the sharded targets carries
_ROLES = {s: role_of_suffix(s) for s in suffixes_of(*CODEC_ROLES) if s != "scale"}


class ShardedView(ConfigView):
    """A ``vllm-sharded`` output read per rank (see the module docstring)."""

    presliced = True

    def __init__(self, root: Path, *, tp: int) -> None:
        self.root = Path(root)
        try:
            config: dict[str, Any] = json.loads((self.root / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.root / 'config.json'}: cannot read it ({exc})") from None
        super().__init__(config, where=str(self.root / "config.json"))
        self.tp = tp
        self.spec = load_spec(
            self.facts.family, DEFAULT_TARGET, self.config.get("architectures") or []
        )
        self.keys = KeyResolver(self.spec)
        self.files = {r: rank_files(self.root, r, self.spec.files.pattern) for r in range(tp)}
        missing = [r for r, f in self.files.items() if not f]
        if missing:
            raise InputError(
                f"{self.root}: no files for TP rank(s) {missing} ({self.spec.files.pattern}); "
                "the vllm-sharded output is incomplete"
            )

    @classmethod
    def open(cls, root: str | Path, *, tp: int) -> ShardedView:
        return cls(Path(root), tp=tp)

    @property
    def where(self) -> str:
        return str(self.root)

    @cached_property
    def facts(self) -> ModelFacts:
        return model_facts(self.config)

    # -- keys and tensors ----------------------------------------------------------------------
    @cached_property
    def _where_is(self) -> dict[int, dict[str, Path]]:
        """rank -> key -> file."""
        out: dict[int, dict[str, Path]] = {}
        for rank, files in self.files.items():
            names: dict[str, Path] = {}
            for f in files:
                with safe_open(str(f), framework="pt") as fh:
                    names.update(dict.fromkeys(fh.keys(), f))
            out[rank] = names
        return out

    def key(self, module: str, param: str) -> str:
        return self.keys.key(module, param)

    def has(self, module: str, param: str, rank: int = 0) -> bool:
        return self.key(module, param) in self._where_is[rank]

    def read(self, module: str, param: str, rank: int = 0) -> torch.Tensor:
        key = self.key(module, param)
        path = self._where_is[rank].get(key)
        if path is None:
            raise InputError(f"{self.where}: rank {rank} has no tensor {key!r} ({module}.{param})")
        with safe_open(str(path), framework="pt") as fh:
            return fh.get_tensor(key)

    def scheme(self, module: str) -> Scheme:
        return resolve_tensor(
            self.qconfig, f"{module}.weight", semantics="vllm", cache=self._scheme_cache
        ).scheme

    # -- headers-level facts for sampling --------------------------------------------------------
    def fused_slots(self, layer: int) -> list[int]:
        """The FSE slots ``ckpt convert`` recorded (the stacked w13 cannot tell them apart)."""
        return self.recorded_slots(layer) or []

    def _w13_rows(self, layer: int) -> int | None:
        module = self.spec.moe_module(layer)
        prefix = self.spec.moe.w13.split("{param}")[0]
        key = self.key(module, f"{prefix}weight")
        path = self._where_is[0].get(key)
        if path is None:
            return None
        with safe_open(str(path), framework="pt") as fh:
            return fh.get_slice(key).get_shape()[1]

    def expert_intermediate(self, layer: int) -> int | None:
        rows = self._w13_rows(layer)
        return None if rows is None else rows // 2 * self.tp

    def routed_scheme(self, layer: int) -> Scheme | None:
        if self._w13_rows(layer) is None:
            return None
        return self.scheme(self.layer_facts(layer).routed_module(0, "gate"))

    def shared_scheme(self, layer: int) -> Scheme | None:
        lf = self.layer_facts(layer)
        slots = self.fused_slots(layer)
        if slots:
            return self.scheme(lf.routed_module(slots[0], "gate"))
        if lf.shared_prefix is None:
            return None
        return self.scheme(lf.shared_module("gate"))

    def shared_intermediate(self, layer: int) -> int | None:
        lf = self.layer_facts(layer)
        if lf.shared_prefix is None or self.fused_slots(layer):
            return None
        module = f"{lf.shared_prefix}.gate_up_proj"
        if not self.has(module, "weight"):
            return None
        return self.read(module, "weight").shape[0] // 2 * self.tp

    # -- a layer -------------------------------------------------------------------------------
    def router(self, layer: int) -> Router:
        gate = f"{self.layer_facts(layer).prefix}.gate"
        weight = self.read(gate, "weight").float()
        bias = None
        if self.has(gate, "e_score_correction_bias"):
            bias = self.read(gate, "e_score_correction_bias").float()
        return Router(weight, bias)

    def rank_layers(
        self,
        layer: int,
        *,
        experts: Sequence[int],
        router: Router,
        device: str | torch.device | None = None,
    ) -> tuple[list[MoeLayerWeights], dict[int, int]]:
        """Each rank's slice of ``layer`` restricted to routed ``experts`` (+ fused slots,
        + separate shared experts), and the expert id -> index map of the restriction; on
        ``device`` when given (the CPU by default)."""
        from checkpoint_tool.targets.sharded_read import read_sharded_moe_layer

        lf = self.layer_facts(layer)
        ids = sorted(set(experts))
        slots = self.fused_slots(layer)
        index = torch.tensor(ids, dtype=torch.long)
        out = []
        for rank in range(self.tp):
            tensors = read_sharded_moe_layer(self.root, layer, rank)
            want = lf.n_routed + len(slots)
            if len(tensors) != want:
                raise InputError(
                    f"{self.where}: rank {rank} holds {len(tensors)} expert slot(s) of layer "
                    f"{layer}, config.json implies {want} ({lf.n_routed} routed + "
                    f"{len(slots)} fused shared)"
                )
            routed = [self._expert(lf, e, tensors[e]) for e in ids]
            fused = [self._expert(lf, s, tensors[s]) for s in slots]
            out.append(
                MoeLayerWeights(
                    experts=[*routed, *fused],
                    router_weight=router.weight.index_select(0, index),
                    e_score_correction_bias=None
                    if router.bias is None
                    else router.bias.index_select(0, index),
                    shared=self._shared(lf, rank, fused=bool(slots)),
                    n_fused_shared=len(fused),
                    name=f"{lf.prefix} (rank {rank})",
                )
            )
        if device is not None:
            out = [r.to(device) for r in out]
        return out, {e: i for i, e in enumerate(ids)}

    def _expert(self, lf: MoeLayerFacts, e: int, parts: dict) -> ExpertWeights:
        projs = []
        for proj in ("gate", "up", "down"):
            module = lf.routed_module(e, proj)
            roles = {_ROLES[s]: t for s, t in parts[proj].items() if s in _ROLES}
            projs.append(Projection(roles, self.scheme(module), f"{module} (rank slice)"))
        return ExpertWeights(*projs)

    def _shared(self, lf: MoeLayerFacts, rank: int, *, fused: bool) -> list[ExpertWeights]:
        if fused or lf.shared_prefix is None:
            return []
        gate_up, down = f"{lf.shared_prefix}.gate_up_proj", f"{lf.shared_prefix}.down_proj"
        if not self.has(gate_up, "weight", rank):
            raise InputError(
                f"{self.where}: rank {rank} has no shared expert {self.key(gate_up, 'weight')!r} "
                f"for layer {lf.layer} (its shared experts are not fused either)"
            )
        merged = self._projection(gate_up, lf.shared_module("gate"), rank)
        gate, up = split_gate_up(merged)
        return [ExpertWeights(gate, up, self._projection(down, lf.shared_module("down"), rank))]

    def _projection(self, module: str, hf_module: str, rank: int) -> Projection:
        parts = {
            role: self.read(module, suffix, rank)
            for suffix, role in _ROLES.items()
            if self.has(module, suffix, rank)
        }
        return Projection(parts, self.scheme(hf_module), f"{module} (rank {rank})")
