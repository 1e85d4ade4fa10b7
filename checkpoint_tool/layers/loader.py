"""Runtime layer weights (``runtime.weights.MoeLayerWeights``) read from a checkpoint by name.

One loader for both sides of ``ckpt verify``, because it reads the checkpoint the way an engine
does -- from config.json and tensor names, never from the plan:

- the **source** layout: per-expert tensors (or per-expert fused ``gate_up_proj``, or Quark's
  3-D BF16 ``experts.gate_up_proj`` [E, 2I, H]), shared experts as a separate MLP
  (``shared_experts.*``, one MLP ``n_shared x I`` wide, or indexed);
- the converted **hf** layout: the same names, plus fused shared-expert slots
  ``experts.{n_routed + j}`` where the conversion redirected them (``config.json["ckpt"]``
  records which layers; a recorded slot whose tensors are missing is an error), padded
  intermediate dims, renamed scales.

Schemes come from the checkpoint's own quantization config (``semantics="producer"`` for the
source: what its bytes mean to the producer; ``"vllm"`` for the converted one: what vLLM will
do), scale tensors from the scheme's suffix (any single scale-role sibling as a fallback).

Only the routed experts asked for are read (``experts=[...]``): a sampled DeepSeek-V3 layer
with 32 tokens reads a few dozen of its 256 experts, ``READ_THREADS`` experts at a time.

Example::

    view = CheckpointView.open("/out/model", semantics="vllm")
    router = view.router(3)                              # float32 [256, 7168], bias [256]
    loaded = view.layer(3, experts=[5, 17, 200])
    loaded.weights.n_routed, loaded.weights.n_fused_shared, loaded.slot_of[17]   # (3, 1, 1)
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

import torch

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.catalog.reader import read_rows
from checkpoint_tool.errors import InputError
from checkpoint_tool.layers.fastread import TensorReader
from checkpoint_tool.layers.view import (
    ConfigView,
    Router,
    engine_w13_global_scale,
    split_gate_up,
)
from checkpoint_tool.model import ModelFacts, MoeLayerFacts, model_facts
from checkpoint_tool.quant.resolve import resolve_tensor, split_tensor_name
from checkpoint_tool.quant.roles import suffixes_of
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.runtime.interleave import split_interleaved
from checkpoint_tool.runtime.reference import dequantize_projection
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights, Projection

Semantics = Literal["vllm", "producer"]
#: where expert tensors are read to (None: the CPU)
Device = str | torch.device | None
#: the fallback names of a weight's scale and global scale (``quant.roles``)
_SCALE_SUFFIXES = suffixes_of("scale")
_GLOBAL_SUFFIXES = suffixes_of("global_scale")
#: router bias names, DeepSeek's ``e_score_correction_bias`` before a plain ``bias``
_BIAS_NAMES = sorted(suffixes_of("bias"), key=lambda s: s != "e_score_correction_bias")
#: DeepSeek-V4 hash-routed layers: ``ffn.gate.tid2eid`` [vocab, top_k] (vLLM ``DeepseekV4MoE``)
_HASH_TABLE = "tid2eid"


@dataclass(frozen=True)
class LoadedLayer:
    """A layer restricted to some routed experts: ``slot_of[e]`` is expert e's index in it."""

    weights: MoeLayerWeights
    slot_of: dict[int, int]
    #: fused shared-expert slots (``n_routed + j``) found in the checkpoint
    fused_slots: list[int] = field(default_factory=list)


class CheckpointView(ConfigView):
    """A checkpoint read like an engine reads it: facts from config.json, schemes from its
    quantization config, tensors by name (see the module docstring)."""

    def __init__(self, catalog: Catalog, *, semantics: Semantics = "vllm") -> None:
        self.catalog = catalog
        self.semantics = semantics
        self._reader = TensorReader(catalog)  # descriptors closed with the view
        weakref.finalize(self, self._reader.close)
        if not catalog.config:
            raise InputError(f"{catalog.root}: no config.json; verify needs the model config")
        super().__init__(
            catalog.config,
            where=str(catalog.root / "config.json"),
            hf_quant_config=catalog.hf_quant_config,
        )

    @classmethod
    def open(cls, path: str | Path, *, semantics: Semantics = "vllm") -> CheckpointView:
        return cls(open_catalog(path, headers_only=False), semantics=semantics)

    # -- model-level facts --------------------------------------------------------------------
    @cached_property
    def facts(self) -> ModelFacts:
        return model_facts(self.config, set(self.catalog.tensors))

    @property
    def where(self) -> str:
        return str(self.catalog.source or self.catalog.root)

    def fused_slots(self, layer: int) -> list[int]:
        """Shared-expert slots ``n_routed + j`` present as routed experts (or recorded)."""
        lf = self.layer_facts(layer)
        present = [  # 3-D fused experts have no per-expert names: no slots can be appended
            lf.n_routed + j
            for j in range(max(lf.n_shared, 0))
            if lf.naming.routed_layout != "fused_3d"
            and lf.routed_weight(lf.n_routed + j, "gate") in self.catalog.tensors
        ]
        recorded = self.recorded_slots(layer)
        return sorted(set(present) | set(recorded or []))

    def has_shared_module(self, layer: int) -> bool:
        lf = self.layer_facts(layer)
        return any(f"{m}.weight" in self.catalog.tensors for m in lf.shared_modules())

    # -- tensors ------------------------------------------------------------------------------
    def scheme(self, name: str) -> Scheme:
        entry = self.catalog.get(name)
        return resolve_tensor(
            self.qconfig,
            name,
            dtype=entry.dtype,
            shape=entry.shape,
            semantics=self.semantics,
            cache=self._scheme_cache,
        ).scheme

    def read(self, name: str, what: str, device: Device = None) -> torch.Tensor:
        if name not in self.catalog.tensors:
            raise InputError(f"{self.where}: {what} tensor {name!r} is missing")
        return self._reader.read(self.catalog.get(name), device)

    @cached_property
    def _siblings(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for name in self.catalog.tensors:
            module, suffix = split_tensor_name(name)
            out.setdefault(module, {})[suffix] = name
        return out

    def projection(
        self, module: str, weight: str | None = None, device: Device = None
    ) -> Projection:
        """One linear by module name: weight, scale, NVFP4 global scale, INT4 zero points;
        scheme resolved; its tensors on ``device`` (None: the CPU)."""
        if weight is None:
            packed = f"{module}.weight_packed"  # compressed-tensors
            weight = packed if packed in self.catalog.tensors else f"{module}.weight"
        scheme = self.scheme(weight) if weight in self.catalog.tensors else None
        if scheme is None:
            raise InputError(f"{self.where}: expert weight {weight!r} is missing")
        parts = {"weight": self.read(weight, "expert weight", device)}
        if scheme.quantized:
            siblings = self._siblings.get(module, {})
            parts["scale"] = self.read(
                self._sibling(module, siblings, scheme.scale_suffix, _SCALE_SUFFIXES, scheme),
                f"{scheme.short()} scale",
                device,
            )
            if scheme.global_scale_suffix:
                parts["global_scale"] = self.read(
                    self._sibling(
                        module, siblings, scheme.global_scale_suffix, _GLOBAL_SUFFIXES, scheme
                    ),
                    f"{scheme.short()} global scale",
                    device,
                )
            if scheme.zero_point_suffix:
                parts["zero_point"] = self.read(
                    self._sibling(module, siblings, scheme.zero_point_suffix, (), scheme),
                    f"{scheme.short()} zero point",
                    device,
                )
        return Projection(parts, scheme, module)

    def _sibling(
        self,
        module: str,
        siblings: dict[str, str],
        suffix: str | None,
        fallbacks: Sequence[str],
        scheme: Scheme,
    ) -> str:
        if suffix and suffix in siblings:
            return siblings[suffix]
        found = [siblings[s] for s in fallbacks if s in siblings]
        if len(found) == 1:
            return found[0]
        want = f"{module}.{suffix}" if suffix else f"a scale of {module}"
        raise InputError(
            f"{self.where}: {scheme.short()} weight {module}.weight has no scale tensor {want!r} "
            f"(siblings: {', '.join(sorted(siblings)) or 'none'})"
        )

    # -- a layer ------------------------------------------------------------------------------
    def hash_routed(self, layer: int) -> bool:
        """A DeepSeek-V4 hash-routed layer: its gate has a ``tid2eid`` table (headers only)."""
        lf = self.layer_facts(layer)
        return f"{lf.prefix}.{lf.naming.router_name}.{_HASH_TABLE}" in self.catalog.tensors

    def swiglu_limit(self) -> float | None:
        """DeepSeek-V4's activation clamp (config.json ``swiglu_limit``; other families: None).

        vLLM reads it only in ``models/deepseek_v4`` (``DeepseekV4MoE.__init__``:
        ``self.swiglu_limit = config.swiglu_limit``). gpt-oss's config.json has one too, but
        vLLM's ``MLPBlock`` never passes it: ``swigluoai`` clamps at its own 7.0
        (``SwigluOAIAndMul``), which ``reference.swiglu`` applies when this is None.
        """
        if self.facts.family != "deepseek_v4":
            return None
        limit = self.text_config.get("swiglu_limit")
        return float(limit) if limit else None

    def router(self, layer: int) -> Router:
        lf = self.layer_facts(layer)
        gate = f"{lf.prefix}.{lf.naming.router_name}"
        weight = self._dense(f"{gate}.weight", "router weight")
        bias = None
        # under the router, or beside it on the MoE block (MiniMax-M3:
        # block_sparse_moe.e_score_correction_bias, vLLM models/minimax_m3 MiniMaxM3MoE)
        # ERNIE-4.5: mlp.moe_statics.e_score_correction_bias [1, E] (the family's naming;
        # vLLM ernie45_moe.py _preprocess renames it to gate. and squeezes it)
        named = [f"{lf.prefix}.{lf.naming.router_bias}"] if lf.naming.router_bias else []
        beside = [f"{gate}.{b}" for b in _BIAS_NAMES] + [f"{lf.prefix}.{b}" for b in _BIAS_NAMES]
        for b in named + beside:
            if b in self.catalog.tensors:
                bias = self.read(b, "router bias").float()
                if bias.dim() == 2 and bias.shape[0] == 1:
                    bias = bias.reshape(-1)
                break
        shared_gate = None
        if lf.has_shared_expert_gate:
            shared_gate = self._dense(f"{lf.prefix}.shared_expert_gate.weight", "shared gate")
        table = None
        if self.hash_routed(layer):
            table = self.read(f"{gate}.{_HASH_TABLE}", "hash routing table").long()
            if table.dim() != 2 or table.shape[1] != lf.top_k:
                raise InputError(
                    f"{self.where}: {gate}.{_HASH_TABLE} shape {list(table.shape)} is not "
                    f"[vocab, num_experts_per_tok={lf.top_k}]"
                )
        return Router(weight, bias, shared_gate, table)

    def _dense(self, name: str, what: str) -> torch.Tensor:
        """float32 value of a (normally unquantized) tensor; quantized ones are dequantized."""
        t = self.read(name, what)
        scheme = self.scheme(name)
        if not scheme.quantized:
            return t.float()
        module = split_tensor_name(name)[0]
        return dequantize_projection(self.projection(module, name))

    def expert(self, layer: int, e: int, device: Device = None) -> ExpertWeights:
        """Routed expert ``e`` (also a fused shared slot ``n_routed + j``) on ``device``."""
        lf = self.layer_facts(layer)
        layout = lf.naming.routed_layout
        if layout == "fused_3d":
            ex = self._expert_3d(lf, e)
            return ex if device is None else ex.map(lambda p: p.to(device))
        down = self.projection(lf.routed_module(e, "down"), device=device)
        if layout == "per_expert_gate_up":
            gate, up = split_gate_up(self.projection(lf.routed_module(e, "gate"), device=device))
        else:
            gate = self.projection(lf.routed_module(e, "gate"), device=device)
            up = self.projection(lf.routed_module(e, "up"), device=device)
        if self.semantics == "vllm":
            up = engine_w13_global_scale(gate, up)
        return ExpertWeights(gate, up, down)

    def _expert_3d(self, lf: MoeLayerFacts, e: int) -> ExpertWeights:
        if lf.naming.fused_3d_weight is not None:
            return self._gpt_oss_expert(lf, e)
        out = []
        for proj in ("gate", "down"):
            name = lf.routed_weight(e, proj)
            entry = self.catalog.tensors.get(name)
            if entry is None:
                raise InputError(f"{self.where}: fused expert tensor {name!r} is missing")
            scheme = self.scheme(name)
            if scheme.quantized or len(entry.shape) != 3:
                raise InputError(
                    f"{self.where}: {name}: only float 3-D expert tensors [E, out, in] are "
                    f"supported, this one is {entry.dtype} {list(entry.shape)} ({scheme.short()})"
                )
            t = read_rows(self.catalog, entry, e, e + 1)[0]
            if lf.naming.fused_3d_order == "in_out":  # [in, out] (Llama-4): a linear's [out, in]
                t = t.transpose(0, 1).contiguous()
            out.append(Projection({"weight": t}, scheme, f"{name}[{e}]"))
        gate, up = split_gate_up(out[0])
        return ExpertWeights(gate, up, out[1])

    def _gpt_oss_expert(self, lf: MoeLayerFacts, e: int) -> ExpertWeights:
        """Expert ``e`` of gpt-oss's 3-D MXFP4 tensors: row ``e`` of ``_blocks`` (kept packed
        ``[E, R, H/2]``), ``_scales`` and ``_bias``; gate and up rows interleaved
        (``runtime.interleave``)."""
        projs = []
        for proj in ("gate", "down"):
            module = lf.fused_3d_param(proj)
            name = lf.routed_weight(e, proj)
            scheme = self.scheme(name)
            parts = {}
            for role, suffix in (("weight", "blocks"), ("scale", "scales"), ("bias", "bias")):
                entry = self.catalog.tensors.get(f"{module}_{suffix}")
                if entry is None:
                    raise InputError(
                        f"{self.where}: gpt-oss expert tensor {module}_{suffix} is missing"
                    )
                parts[role] = read_rows(self.catalog, entry, e, e + 1)[0]
            bias = parts.pop("bias").float()
            projs.append(Projection(parts, scheme, f"{module}[{e}]", bias))
        gate, up = split_interleaved(projs[0])
        return ExpertWeights(gate, up, projs[1])

    def shared(self, layer: int, device: Device = None) -> list[ExpertWeights]:
        """The separate shared expert MLP(s) of ``layer`` (empty when there are none)."""
        lf = self.layer_facts(layer)
        if lf.shared_prefix is None or not self.has_shared_module(layer):
            return []
        indexed = lf.naming.shared_layout == "indexed"
        out = []
        for j in range(lf.n_shared) if indexed else [None]:
            down = self.projection(self._shared_down(lf.shared_module("down", j)), device=device)
            if lf.naming.shared_layout == "single_gate_up":
                gate, up = split_gate_up(
                    self.projection(lf.shared_module("gate", j), device=device)
                )
            else:
                gate = self.projection(lf.shared_module("gate", j), device=device)
                up = self.projection(lf.shared_module("up", j), device=device)
            out.append(ExpertWeights(gate, up, down))
        return out

    def _shared_down(self, module: str) -> str:
        """The shared down projection's module, as the engine's loader names it.

        vLLM's DeepSeek-V4 loader renames ``.shared_experts.w2`` -> ``.shared_experts.down_proj``
        on non-fused layers (``models/deepseek_v4/amd/model.py``
        ``_make_deepseek_v4_weights_mapper``) while ``w1`` / ``w3`` keep their names.
        """
        alias = module.replace(".shared_experts.w2", ".shared_experts.down_proj")
        if (
            f"{module}.weight" not in self.catalog.tensors
            and f"{alias}.weight" in self.catalog.tensors
        ):
            return alias
        return module

    def layer(
        self,
        layer: int,
        *,
        experts: Sequence[int] | None = None,
        router: Router | None = None,
        device: Device = None,
    ) -> LoadedLayer:
        """Layer ``layer`` with routed ``experts`` (all when None), fused slots and shared MLPs.

        The router weight and bias are restricted to the chosen experts, so ``slot_of`` maps
        the model's expert ids to the runtime's (``run_moe(..., topk=(remapped ids, w))``).
        The experts' tensors are read onto ``device`` (None: the CPU; the router stays there).
        """
        lf = self.layer_facts(layer)
        router = router or self.router(layer)
        ids = sorted(set(range(lf.n_routed) if experts is None else experts))
        if not ids or ids[0] < 0 or ids[-1] >= lf.n_routed:
            raise InputError(
                f"{self.where}: layer {layer}: expert ids {ids} not in 0..{lf.n_routed - 1}"
            )
        slots = self.fused_slots(layer)
        experts_read = list(_readers().map(lambda e: self.expert(layer, e, device), [*ids, *slots]))
        routed, fused = experts_read[: len(ids)], experts_read[len(ids) :]
        index = torch.tensor(ids, dtype=torch.long)
        bias = None if router.bias is None else router.bias.index_select(0, index)
        # gpt-oss's router.bias is the router linear's own (vLLM gpt_oss.py MLPBlock:
        # GateLinear(bias=True)), added to the logits; elsewhere a bias only steers the choice
        gpt_oss = self.facts.family == "gpt_oss"
        weights = MoeLayerWeights(
            experts=[*routed, *fused],
            router_weight=router.weight.index_select(0, index),
            e_score_correction_bias=None if gpt_oss else bias,
            router_bias=bias if gpt_oss else None,
            activation="swigluoai" if gpt_oss else "silu",
            shared=self.shared(layer, device),
            n_fused_shared=len(fused),
            shared_gate_weight=router.shared_gate,
            name=lf.prefix,
            hash_table=_restrict_table(router.hash_table, ids, lf.n_routed),
            swiglu_limit=self.swiglu_limit(),
        )
        return LoadedLayer(weights, {e: i for i, e in enumerate(ids)}, slots)

    def rank_layers(
        self, layer: int, *, experts: Sequence[int], router: Router, device: Device = None
    ) -> tuple[list[MoeLayerWeights], dict[int, int]]:
        """``[whole layer]`` restricted to ``experts`` (the runtime slices it per rank)."""
        loaded = self.layer(layer, experts=experts, router=router, device=device)
        return [loaded.weights], loaded.slot_of

    # -- headers-only facts for sampling -------------------------------------------------------
    def shared_intermediate(self, layer: int) -> int | None:
        """Width of the separate shared MLP as stored (None when fused or absent)."""
        lf = self.layer_facts(layer)
        if lf.shared_prefix is None or self.fused_slots(layer):
            return None
        j = 0 if lf.naming.shared_layout == "indexed" else None
        entry = self.catalog.tensors.get(f"{lf.shared_module('gate', j)}.weight")
        if entry is None or len(entry.shape) != 2:
            return None
        rows = entry.shape[0]
        return rows // 2 if lf.naming.shared_layout == "single_gate_up" else rows

    def expert_intermediate(self, layer: int) -> int | None:
        """Intermediate size of routed expert 0 as stored (rows of its gate weight)."""
        lf = self.layer_facts(layer)
        entry = self.catalog.tensors.get(lf.routed_weight(0, "gate"))
        if entry is None or len(entry.shape) < 2:
            return None
        rows = entry.shape[-2]
        return rows // 2 if lf.naming.routed_layout != "per_expert" else rows

    def routed_scheme(self, layer: int) -> Scheme | None:
        lf = self.layer_facts(layer)
        name = lf.routed_weight(0, "gate")
        return self.scheme(name) if name in self.catalog.tensors else None

    def shared_scheme(self, layer: int) -> Scheme | None:
        lf = self.layer_facts(layer)
        slots = self.fused_slots(layer)
        if slots:
            name = lf.routed_weight(slots[0], "gate")
        elif lf.shared_prefix is not None:
            name = f"{lf.shared_module('gate', 0 if lf.naming.shared_layout == 'indexed' else None)}.weight"
        else:
            return None
        return self.scheme(name) if name in self.catalog.tensors else None


#: threads reading experts of a layer at once (reads release the GIL; page cache and NVMe
#: serve parallel reads faster than one stream): the usable cores, 8 to 16
READ_THREADS = max(
    8, min(16, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 8)
)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _readers() -> ThreadPoolExecutor:
    """The process's expert-reading threads (started on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="ckpt-expert-read")
        return _pool


def _restrict_table(
    table: torch.Tensor | None, ids: Sequence[int], n_routed: int
) -> torch.Tensor | None:
    """A hash table over the loaded experts' indexes (experts not loaded -> -1)."""
    if table is None:
        return None
    if table.numel() and (int(table.min()) < 0 or int(table.max()) >= n_routed):
        raise InputError(
            f"hash routing table names experts {int(table.min())}..{int(table.max())}, "
            f"outside 0..{n_routed - 1}"
        )
    lut = torch.full((n_routed,), -1, dtype=torch.long)
    lut[torch.tensor(list(ids), dtype=torch.long)] = torch.arange(len(ids))
    return lut[table]
