"""Read a ``vllm-sharded`` output back: one rank's routed experts as per-expert storage tensors.

For ``ckpt verify`` (and tests): the per-rank ``w13_*`` / ``w2_*`` parameters of a MoE layer are
split back into each expert slot's gate / up / down storage tensors of that rank (``w13``: first
half of the rows gate, second half up; per-tensor ``[E, 2]``: gate, up; one value per expert:
the same for both; ``w2``: down). FSE slots are ``n_routed + j``. Shapes are the rank's shares
(intermediate ``I_r = I' / tp``), padding included.

Example::

    experts = read_sharded_moe_layer("/out/r1-tp2", layer=3, rank=1)
    experts[256]["gate"]["weight"].shape        # torch.Size([1024, 3584]) (MXFP4 U8, I_r rows)
    experts[0]["down"]["weight_scale"].dtype     # torch.uint8
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import torch
from safetensors import safe_open

from checkpoint_tool.errors import InputError
from checkpoint_tool.model import model_facts
from checkpoint_tool.targets import DEFAULT_TARGET, load_spec
from checkpoint_tool.targets.keys import KeyResolver

ExpertTensors = dict[int, dict[str, dict[str, torch.Tensor]]]


def rank_files(dst: os.PathLike[str] | str, rank: int, pattern: str) -> list[Path]:
    """The files of ``rank`` (``pattern`` with ``{rank}``, any ``{part}``), sorted."""
    found = glob.glob(os.path.join(os.fspath(dst), pattern.format(rank=rank, part="*")))
    return sorted(Path(p) for p in found)


def read_sharded_moe_layer(
    dst: os.PathLike[str] | str, layer: int, rank: int, *, target: str = DEFAULT_TARGET
) -> ExpertTensors:
    """``{slot: {"gate"|"up"|"down": {param suffix: storage tensor}}}`` of MoE ``layer`` on
    ``rank`` of the ``vllm-sharded`` output in ``dst``."""
    root = Path(dst)
    try:
        config = json.loads((root / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{root / 'config.json'}: cannot read it ({exc})") from None
    spec = load_spec(model_facts(config).family, target, config.get("architectures") or [])
    files = rank_files(root, rank, spec.files.pattern)
    if not files:
        raise InputError(
            f"{root}: no files for rank {rank} ({spec.files.pattern}); is it a vllm-sharded output?"
        )
    module = spec.moe_module(layer)
    keys = KeyResolver(spec)
    w13_prefix = spec.moe.w13.split("{param}")[0]
    w2_prefix = spec.moe.w2.split("{param}")[0]
    wanted: dict[str, tuple[str, str]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            names = set(fh.keys())
        for name in names:
            for prefix, which in ((w13_prefix, "w13"), (w2_prefix, "w2")):
                for suffix in _suffixes(name, module, prefix, keys):
                    wanted[name] = (which, suffix)
    if not wanted:
        raise InputError(f"{root}: rank {rank} holds no routed experts of layer {layer}")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            for name in fh.keys():
                if name in wanted:
                    tensors[name] = fh.get_tensor(name)
    w2_ndim = {suffix: tensors[n].ndim for n, (which, suffix) in wanted.items() if which == "w2"}
    out: ExpertTensors = {}
    for name, (which, suffix) in sorted(wanted.items()):
        t = tensors[name]
        for e in range(t.shape[0]):
            slot = out.setdefault(e, {"gate": {}, "up": {}, "down": {}})
            if which == "w2":
                slot["down"][suffix] = t[e]
            elif w2_ndim.get(suffix, t.ndim) == 1:  # per-tensor values: [E, 2] or [E]
                pair = t[e]
                slot["gate"][suffix] = pair[0] if pair.ndim else pair
                slot["up"][suffix] = pair[1] if pair.ndim else pair
            else:
                half = t.shape[1] // 2
                slot["gate"][suffix] = t[e, :half]
                slot["up"][suffix] = t[e, half:]
    return out


def _suffixes(name: str, module: str, prefix: str, keys: KeyResolver) -> list[str]:
    """The parameter suffix ``p`` when ``name`` is ``key(module, prefix + p)``."""
    if f".{prefix}" not in name:
        return []
    p = name.rsplit(f".{prefix}", 1)[1]
    return [p] if keys.key(module, prefix + p) == name else []
