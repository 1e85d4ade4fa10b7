"""Engram tables (DeepSeek-V4.1): the converted table, read as vLLM loads it, decodes to the
source's values.

An engram layer's table is FP8 rows with an E8M0 scale per 32 columns (MXFP8 storage). The
source names it ``layers.N.engram.embed.weight`` + ``.scale`` (Quark: ``.weight_scale``);
vLLM's ``Engram`` module registers ``embed_tokens.weight`` and ``embed_tokens.weight_scale_inv``
(vLLM 0.33 ``models/deepseek_v41/common/engram.py``: ``Engram.__init__`` names the table
``embed_tokens`` "so the checkpoint's engram.embed.weight survives the mapper's embed.weight ->
embed_tokens.weight suffix rule"; ``ParallelEngramEmbedding.__init__`` registers ``weight`` and
``weight_scale_inv``). A scale the rename rules send anywhere else is not loaded: the table
then fails here, naming the tensor that is missing and the stray one.

Per engram layer, ``rows`` seeded rows are read (rows only, never the whole table) from both
checkpoints and decoded by the codec; the converted side must equal the source exactly (same
bytes, same decode).

Example::

    [r.status for r in check_engram(src_view, dst_view, rows=16, seed=0)]   # ['passed']
"""

from __future__ import annotations

import torch

from checkpoint_tool.catalog.reader import read_rows
from checkpoint_tool.errors import CkptError, InputError
from checkpoint_tool.layers.loader import CheckpointView
from checkpoint_tool.quant.codecs import get_codec
from checkpoint_tool.quant.resolve import split_tensor_name
from checkpoint_tool.verify.report import EngramResult

#: the parameters vLLM's engram table registers (ParallelEngramEmbedding)
ENGINE_PARAMS = ("weight", "weight_scale_inv")
_SOURCE_SCALES = ("scale", "weight_scale", "weight_scale_inv")


def engram_layers(view: CheckpointView) -> list[int]:
    """``engram_layer_ids`` of a DeepSeek-V4(.1) config (empty for other models)."""
    if view.facts.family != "deepseek_v4":
        return []
    ids = view.text_config.get("engram_layer_ids") or []
    return [int(i) for i in ids if int(i) < view.facts.num_hidden_layers]


def check_engram(
    src: CheckpointView, dst: CheckpointView, *, rows: int, seed: int
) -> list[EngramResult]:
    """One result per engram layer of the source (see the module docstring)."""
    return [_check(src, dst, layer, rows, seed) for layer in engram_layers(src)]


def _check(
    src: CheckpointView, dst: CheckpointView, layer: int, rows: int, seed: int
) -> EngramResult:
    src_module = _module(src, layer, "embed")
    dst_module = _module(dst, layer, "embed_tokens")
    result = EngramResult(layer=layer, tensor=f"{dst_module}.weight", status="failed")
    try:
        s_weight, s_scale = src_module + ".weight", _source_scale(src, src_module)
    except CkptError as exc:
        result.status, result.message = "skipped", f"source: {exc.message}"
        return result
    d_weight, d_scale = (f"{dst_module}.{p}" for p in ENGINE_PARAMS)
    missing = [n for n in (d_weight, d_scale) if n not in dst.catalog.tensors]
    if missing:
        stray = sorted(
            n for n in dst.catalog.tensors if f"layers.{layer}.engram." in n and n not in missing
        )
        result.message = (
            f"converted: {', '.join(missing)} missing (vLLM's engram table loads "
            f"{dst_module}.{{{','.join(ENGINE_PARAMS)}}}); engram tensors found: "
            f"{', '.join(stray) or 'none'}"
        )
        return result
    entry = src.catalog.get(s_weight)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + layer + 13)
    picks = sorted(set(torch.randint(0, entry.shape[0], (rows,), generator=gen).tolist()))
    try:
        ref = _decode(src, s_weight, s_scale, picks)
        got = _decode(dst, d_weight, d_scale, picks)
    except CkptError as exc:
        result.message = exc.message
        return result
    result.rows_checked = len(picks)
    if got.shape != ref.shape:
        result.message = f"converted rows decode to {list(got.shape)}, source {list(ref.shape)}"
        return result
    diff = (got - ref).abs()
    result.max_abs_error = float(diff.max()) if diff.numel() else 0.0
    same = bool(torch.equal(got, ref))
    result.status = "passed" if same else "failed"
    if not same:
        bad = int((diff != 0).any(dim=1).sum())
        result.message = f"{bad} of {len(picks)} sampled rows decode to other values"
    return result


def _module(view: CheckpointView, layer: int, leaf: str) -> str:
    """``{root}.{layer}.engram.{leaf}`` with the view's layer root (``layers`` / ``model.layers``)."""
    root = view.facts.moe_layers[0].prefix.rsplit(".", 2)[0] if view.facts.moe_layers else "layers"
    return f"{root}.{layer}.engram.{leaf}"


def _source_scale(view: CheckpointView, module: str) -> str:
    if f"{module}.weight" not in view.catalog.tensors:
        raise InputError(f"{view.where}: engram table {module}.weight is missing")
    for suffix in _SOURCE_SCALES:
        if f"{module}.{suffix}" in view.catalog.tensors:
            return f"{module}.{suffix}"
    raise InputError(f"{view.where}: engram table {module}.weight has no scale tensor")


def _decode(view: CheckpointView, weight: str, scale: str, picks: list[int]) -> torch.Tensor:
    """float32 decoded rows ``picks`` of an FP8 + E8M0 table (the codec's dequantize)."""
    scheme = view.scheme(weight)
    if not scheme.quantized:
        raise InputError(f"{view.where}: engram table {weight} resolves as unquantized")
    w_entry, s_entry = view.catalog.get(weight), view.catalog.get(scale)
    if split_tensor_name(scale)[0] != split_tensor_name(weight)[0]:
        raise InputError(f"{view.where}: {scale} is not a sibling of {weight}")
    out = []
    for r in picks:
        parts = {
            "weight": read_rows(view.catalog, w_entry, r, r + 1),
            "scale": read_rows(view.catalog, s_entry, r, r + 1),
        }
        out.append(get_codec(scheme).dequantize(parts).float())
    return torch.cat(out)
