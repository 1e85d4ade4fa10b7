"""Observation only: what vLLM's loader wrote, taken before ``process_weights_after_loading``.

Three wrappers, each calls straight through to vLLM's own code with the same arguments:

- around ``DefaultModelLoader.load_weights``: before it runs, each parameter's
  ``weight_loader`` is wrapped by a recorder that counts the successful calls per
  ``(parameter, shard_id, expert_id)`` (the loader itself is vLLM's, unchanged);
- around ``base_loader.process_weights_after_loading``: on entry (weights loaded, nothing
  repacked yet) every parameter is written to ``$CKPT_ENGINE_JUDGE_DUMP/rank{r}.safetensors``
  as raw bytes, with ``rank{r}.json``::

    {"tp_rank": 0, "tp_size": 1, "load_format": "auto",
     "params": {"model.layers.1.mlp.experts.w13_weight": {"dtype": "uint8", "shape": [9, 256, 128]}},
     "writes": [["model.layers.1.mlp.experts.w13_weight", "w1", 8, 1], ...],
     "fse_layers": {"model.layers.1.mlp": true}, "fse_model": true,
     "moe": {"model.layers.1.mlp.experts": {"global_num_experts": 8, "local_num_experts": 9}}}

  then, with ``STOP_ENV`` set, the engine is stopped (``SnapshotTaken``);
- around ``resolve_layer_fused_shared_expert`` (vLLM's per-layer FSE gate): each answer goes
  to ``gate-rank{r}.json`` as it is given, also for a model vLLM then refuses.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from pathlib import Path

DUMP_ENV = "CKPT_ENGINE_JUDGE_DUMP"
#: set to 1 to stop the engine right after the snapshot: vLLM's FP4 MoE emulation experts are
#: Triton-only and the CPU build has no Triton backend, so start-up would fail in the
#: profiling forward pass; the judge needs the loaded parameters only
STOP_ENV = "CKPT_ENGINE_JUDGE_STOP_AFTER_SNAPSHOT"


class SnapshotTaken(RuntimeError):
    """Raised after the snapshot when ``STOP_ENV`` asks for the load only."""


_writes: Counter = Counter()
_load_format: list[str] = ["auto"]


def _recorder(name: str, loader):  # type: ignore[no-untyped-def]
    @functools.wraps(loader)
    def record(param, loaded_weight, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = loader(param, loaded_weight, *args, **kwargs)
        ok = result if kwargs.get("return_success") else True
        if ok is not False:
            shard = kwargs.get("shard_id", args[0] if args else None)
            _writes[(name, None if shard is None else str(shard), kwargs.get("expert_id"))] += 1
        return result

    record.__ckpt_judge__ = True  # type: ignore[attr-defined]
    return record


def _install_recorders(model) -> None:  # type: ignore[no-untyped-def]
    _writes.clear()
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    for name, param in model.named_parameters():
        # a parameter without one is loaded with default_weight_loader (getattr default in
        # every model's load_weights): the same function, now counted
        loader = getattr(param, "weight_loader", None) or default_weight_loader
        if getattr(loader, "__ckpt_judge__", False):
            continue
        try:
            param.weight_loader = _recorder(name, loader)
        except AttributeError:
            pass


def _fse_state(model) -> tuple[dict, bool | None, dict]:  # type: ignore[no-untyped-def]
    layers: dict[str, bool] = {}
    moe: dict[str, dict] = {}
    whole: bool | None = None
    for name, mod in model.named_modules():
        flag = mod.__dict__.get("is_fused_shared_expert_enabled")
        if isinstance(flag, bool):
            if hasattr(mod, "layers"):
                whole = flag
            else:
                layers[name] = flag
        if hasattr(mod, "global_num_experts") and _has_w13(mod):
            moe[name] = {
                "global_num_experts": int(mod.global_num_experts),
                "num_fused_shared_experts": int(getattr(mod, "num_fused_shared_experts", 0) or 0),
                "local_num_experts": int(getattr(mod, "local_num_experts", 0) or 0),
            }
    return layers, whole, moe


def _has_w13(mod) -> bool:  # type: ignore[no-untyped-def]
    """A FusedMoE layer's gate/up parameter: ``w13_weight``, or ``w13_weight_packed``
    (compressed-tensors' WNA16 / NVFP4 methods)."""
    return hasattr(mod, "w13_weight") or hasattr(mod, "w13_weight_packed")


def _split_kind(mod) -> str:  # type: ignore[no-untyped-def]
    """How TP splits this layer's parameters: replicated, column, merged_column, row, vocab,
    moe or other (read off vLLM's classes: observation only)."""
    from vllm.model_executor.layers.linear import (
        ColumnParallelLinear,
        LinearBase,
        MergedColumnParallelLinear,
        RowParallelLinear,
    )
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    if hasattr(mod, "global_num_experts") and _has_w13(mod):
        return "moe"
    if isinstance(mod, VocabParallelEmbedding):
        return "vocab"
    if isinstance(mod, LinearBase):
        if getattr(mod, "tp_size", 1) == 1:
            return "replicated"
        if isinstance(mod, MergedColumnParallelLinear):
            return "merged_column"
        if isinstance(mod, ColumnParallelLinear):
            return "column"
        if isinstance(mod, RowParallelLinear):
            return "row"
        return "replicated"  # ReplicatedLinear
    return "replicated" if not list(mod.children()) and "Norm" in type(mod).__name__ else "other"


def snapshot(model) -> None:  # type: ignore[no-untyped-def]
    """Write every parameter's bytes and the write counts (``DUMP_ENV`` names the folder)."""
    out = os.environ.get(DUMP_ENV)
    if not out:
        return
    import torch
    from safetensors.torch import save_file
    from vllm.distributed import (
        get_tensor_model_parallel_rank,
        get_tensor_model_parallel_world_size,
    )

    rank, size = get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
    tensors, meta = {}, {}
    owner, split = {}, {}
    for mod_name, mod in model.named_modules():
        for leaf, _ in mod.named_parameters(recurse=False):
            key = f"{mod_name}.{leaf}" if mod_name else leaf
            owner[key], split[key] = type(mod).__name__, _split_kind(mod)
    for name, param in model.named_parameters():
        data = param.detach().to("cpu").contiguous()
        meta[name] = {
            "dtype": str(data.dtype).removeprefix("torch."),
            "shape": list(data.shape),
            "module": owner.get(name),
            "split": split.get(name),
            "output_dim": getattr(param, "output_dim", None),
            "input_dim": getattr(param, "input_dim", None),
        }
        tensors[name] = data.reshape(-1).view(torch.uint8).clone()
    layers, whole, moe = _fse_state(model)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / f"rank{rank}.safetensors"))
    info = {
        "tp_rank": rank,
        "tp_size": size,
        "load_format": _load_format[0],
        "params": meta,
        "writes": sorted([[*list(k), v] for k, v in _writes.items()], key=str),
        "fse_layers": layers,
        "fse_model": whole,
        "moe": moe,
    }
    (folder / f"rank{rank}.json").write_text(json.dumps(info, sort_keys=True))


def _gate_observer() -> None:
    """Record each answer of vLLM's per-layer FSE gate (``resolve_layer_fused_shared_expert``)
    to ``$DUMP/gate.json`` as it is given: a model vLLM refuses (all-or-nothing) never
    reaches the snapshot, its per-layer answers still reach the judge."""
    import sys

    import vllm.model_executor.layers.fused_moe.utils as utils

    original = utils.resolve_layer_fused_shared_expert
    if getattr(original, "__ckpt_judge__", False):
        return

    @functools.wraps(original)
    def resolve_layer_fused_shared_expert(quant_config, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = os.environ.get(DUMP_ENV)
        try:
            answer = original(quant_config, prefix, *args, **kwargs)
        except Exception as exc:
            if out:
                _record_gate(Path(out), prefix, f"{type(exc).__name__}: {exc}")
            raise
        if out:
            _record_gate(Path(out), prefix, bool(answer))
        return answer

    resolve_layer_fused_shared_expert.__ckpt_judge__ = True  # type: ignore[attr-defined]
    for name, mod in list(sys.modules.items()):
        if (
            name.startswith("vllm")
            and getattr(mod, "__dict__", {}).get("resolve_layer_fused_shared_expert") is original
        ):
            mod.resolve_layer_fused_shared_expert = resolve_layer_fused_shared_expert


def _record_gate(folder: Path, prefix: str, answer: bool | str) -> None:
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        rank = get_tensor_model_parallel_rank()
    except Exception:
        rank = 0
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"gate-rank{rank}.json"
    seen = json.loads(path.read_text()) if path.exists() else {}
    seen[prefix] = answer
    path.write_text(json.dumps(seen, sort_keys=True))


def install() -> None:
    """Wrap the two loader hooks and the FSE gate (idempotent)."""
    _gate_observer()  # the origin module and every module that already imported it
    from vllm.model_executor.model_loader import base_loader
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
    from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader

    if not getattr(DefaultModelLoader.load_weights, "__ckpt_judge__", False):
        original = DefaultModelLoader.load_weights

        def load_weights(self, model, model_config):  # type: ignore[no-untyped-def]
            _load_format[0] = "auto"
            _install_recorders(model)
            return original(self, model, model_config)

        load_weights.__ckpt_judge__ = True  # type: ignore[attr-defined]
        DefaultModelLoader.load_weights = load_weights

    if not getattr(ShardedStateLoader.load_weights, "__ckpt_judge__", False):
        sharded = ShardedStateLoader.load_weights

        def load_sharded(self, model, model_config):  # type: ignore[no-untyped-def]
            _load_format[0] = "sharded_state"
            _writes.clear()  # whole per-rank tensors: vLLM's loader checks every key
            return sharded(self, model, model_config)

        load_sharded.__ckpt_judge__ = True  # type: ignore[attr-defined]
        ShardedStateLoader.load_weights = load_sharded

    if not getattr(base_loader.process_weights_after_loading, "__ckpt_judge__", False):
        process = base_loader.process_weights_after_loading

        def process_weights_after_loading(model, model_config, target_device):  # type: ignore[no-untyped-def]
            snapshot(model)
            if os.environ.get(STOP_ENV) == "1":
                raise SnapshotTaken(
                    "ckpt engine judge: parameters written; engine start-up stopped"
                )
            return process(model, model_config, target_device)

        process_weights_after_loading.__ckpt_judge__ = True  # type: ignore[attr-defined]
        base_loader.process_weights_after_loading = process_weights_after_loading
