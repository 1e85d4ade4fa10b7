"""Verify's view of requantized shared experts (``ckpt convert --requantize-shared mxfp4``).

An independent implementation of what the converter does, so a bug in one cannot hide in the
other:

- the source projection is read and dequantized through the source's **quantization config**
  (``layers.loader.CheckpointView``, producer semantics) instead of the tensors' dtypes;
- it is quantized by the MXFP4 **codec** (``quant.codecs.MxFp4Codec``: bucketize with a tie
  fix-up, and Quark's +0 for negative values that round to zero) instead of the converter's
  compare-and-count quantizer (``quant.requant.mxfp4``).

``IndependentRequant`` serves requantized plan pieces (``requant="mxfp4"``, keyed
``<module>.weight@mxfp4`` / ``.weight_scale@mxfp4`` by ``verify.expected.source_key``) to the
lossless check (headers and rows); ``requantized_reference`` swaps a source layer's shared
expert for its requantized self, so the numeric check compares like with like;
``weight_errors`` recomputes each module's weight-space error against the source's dequantized
values, which must match what convert recorded in ``config.json["ckpt"]["requantized_shared"]``.

Example::

    ind = IndependentRequant(source_catalog)
    ind.lookup("model.layers.1.mlp.shared_experts.down_proj.weight@mxfp4")   # ('U8', (256, 64))
    ind.rows("model.layers.1.mlp.shared_experts.down_proj.weight@mxfp4", 0, 2).shape  # (2, 64, 1)
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.codecs import MxFp4Codec, get_codec
from checkpoint_tool.quant.requant.scheme import MXFP4_SCHEME, REQUANT
from checkpoint_tool.quant.resolve import split_tensor_name


def codec_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4 by the codec, as Quark 0.13 exports it: negative zeros written +0, scale bytes at
    least 1 (``quant.requant.mxfp4`` says why)."""
    parts = MxFp4Codec().quantize(w)
    b = parts["weight"]
    lo, hi = b & 0x0F, b >> 4
    lo = torch.where(lo == 8, torch.zeros_like(lo), lo)
    hi = torch.where(hi == 8, torch.zeros_like(hi), hi)
    return (lo | (hi << 4)).to(torch.uint8), parts["scale"].clamp(min=1)  # Quark: >= 2**-126


class IndependentRequant:
    """Requantized source modules, by name, from the source checkpoint (see the module doc)."""

    def __init__(self, catalog: Catalog) -> None:
        from checkpoint_tool.layers.loader import CheckpointView

        self.view = CheckpointView(catalog, semantics="producer")
        self._cache: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def _module(self, name: str) -> tuple[str, str]:
        module, part = split_tensor_name(name.removesuffix(f"@{REQUANT}"))
        if f"{module}.weight" not in self.view.catalog.tensors or part not in (
            "weight",
            "weight_scale",
        ):
            raise InputError(
                f"the plan reads requantized tensor {name!r}, whose module has no weight in the "
                "source; pass the --source DST was converted from"
            )
        return module, part

    def source_weight(self, module: str) -> torch.Tensor:
        """The module's weight dequantized through the source's quantization config."""
        p = self.view.projection(module)
        return get_codec(p.scheme).dequantize(p.parts).to(torch.float32)

    def quantized(self, module: str) -> tuple[np.ndarray, np.ndarray]:
        hit = self._cache.get(module)
        if hit is None:
            packed, scales = codec_mxfp4(self.source_weight(module))
            hit = self._cache[module] = (packed.numpy(), scales.numpy())
            while len(self._cache) > 2:
                self._cache.popitem(last=False)
        return hit

    def lookup(self, name: str) -> tuple[str, tuple[int, ...]]:
        module, part = self._module(name)
        n, k = self.view.catalog.tensors[f"{module}.weight"].shape
        return "U8", (n, k // 2 if part == "weight" else k // 32)

    def rows(self, name: str, r0: int, r1: int) -> np.ndarray:
        module, part = self._module(name)
        packed, scales = self.quantized(module)
        arr = packed if part == "weight" else scales
        return arr[r0:r1, :, None]


def recorded(meta: dict[str, Any]) -> dict[str, Any] | None:
    """``config.json["ckpt"]["requantized_shared"]`` of a converted checkpoint, or None."""
    rec = meta.get("requantized_shared") if isinstance(meta, dict) else None
    return rec if isinstance(rec, dict) and rec.get("layers") else None


def requantized_reference(loaded: Any, layer: int, meta: dict[str, Any]) -> Any:
    """``loaded`` (a source ``LoadedLayer``) with its shared experts requantized when convert
    requantized ``layer``'s (else unchanged)."""
    rec = recorded(meta)
    if rec is None or layer not in rec["layers"]:
        return loaded
    from checkpoint_tool.runtime.weights import ExpertWeights, Projection

    def requant(p: Projection) -> Projection:
        if p.name not in rec.get("modules", {}):
            return p
        w = get_codec(p.scheme).dequantize(p.parts).to(torch.float32)
        packed, scales = codec_mxfp4(w)
        return Projection({"weight": packed, "scale": scales}, MXFP4_SCHEME, p.name)

    shared = [ExpertWeights(*(requant(p) for p in e.projections())) for e in loaded.weights.shared]
    return replace(loaded, weights=replace(loaded.weights, shared=shared))


def weight_errors(catalog: Catalog, meta: dict[str, Any]) -> dict[int, float]:
    """Layer -> weight-space relative error of its requantized shared expert, recomputed."""
    rec = recorded(meta)
    if rec is None:
        return {}
    ind = IndependentRequant(catalog)
    sums: dict[int, list[float]] = {}
    for module in sorted(rec.get("modules", {})):
        layer = next((n for n in rec["layers"] if f".layers.{n}." in f".{module}."), None)
        if layer is None:
            continue
        w = ind.source_weight(module)
        packed, scales = codec_mxfp4(w)
        back = MxFp4Codec().dequantize({"weight": packed, "scale": scales})
        acc = sums.setdefault(layer, [0.0, 0.0])
        acc[0] += float((back.double() - w.double()).pow(2).sum())
        acc[1] += float(w.double().pow(2).sum())
    return {n: (e / r) ** 0.5 if r else 0.0 for n, (e, r) in sorted(sums.items())}


def check_errors(catalog: Catalog, meta: dict[str, Any]) -> tuple[list[str], bool]:
    """Notes on the recomputed weight errors against the recorded ones; ok=False on a gap."""
    rec = recorded(meta)
    if rec is None:
        return [], True
    got = weight_errors(catalog, meta)
    notes, ok = [], True
    for n, err in got.items():
        want = (rec.get("errors") or {}).get(str(n), {}).get("weight_rel_error")
        if want is not None and abs(err - want) > 1e-3 * max(want, 1e-12) + 1e-9:
            ok = False
            notes.append(
                f"requantized layer {n}: weight error {err:.4g} recomputed from the source, "
                f"{want:.4g} recorded by convert; the output was not made from this source"
            )
        else:
            notes.append(
                f"requantized layer {n}: shared expert bytes checked against an independent "
                f"MXFP4 quantizer; weight error vs the source's dequantized values {err:.4g}"
            )
    return notes, ok
