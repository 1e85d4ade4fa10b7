"""NVFP4 gate/up global scales: vLLM fuses w1 and w3 into one GEMM with one global scale.

For each routed expert stored as NVFP4, the 0-d ``weight_scale_2`` (and the activation
global scale, ``input_scale_2`` for Quark / ``input_scale`` for ModelOpt) of gate (w1) and up
(w3) are read by byte range (4 bytes each, one open per shard) and compared as
``torch.allclose`` does (rtol 1e-5, atol 1e-8). vLLM warns "w1_weight_scale_2 must match
w3_weight_scale_2" and uses w1's; the finding names the experts and the largest relative
difference.

Example::

    check_nvfp4(ctx, rules)
    # [EngineFinding(rule='nvfp4_gate_up_global_scale', layers=[1],
    #                details={'max_rel': 0.25, 'worst': 'layer 1 expert 3', ...})]
"""

from __future__ import annotations

import os
import struct
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from checkpoint_tool.quant.scheme import WeightFormat

from .context import EngineContext
from .model import EngineFinding, RuleSpec

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog

NVFP4_RULES = ("nvfp4_gate_up_global_scale", "nvfp4_gate_up_input_scale")

RTOL, ATOL = 1e-5, 1e-8


def read_f32_scalars(catalog: Catalog, names: Iterable[str]) -> dict[str, float]:
    """Values of 0-d F32 tensors, read by byte range (one open per file). Others are skipped."""
    by_file: dict[str, list[Any]] = defaultdict(list)
    for name in names:
        entry = catalog.tensors.get(name)
        if entry is not None and entry.dtype == "F32" and entry.end - entry.begin == 4:
            by_file[entry.file].append(entry)
    out: dict[str, float] = {}
    for file, entries in sorted(by_file.items()):
        fd = os.open(catalog.path_of(file), os.O_RDONLY)
        try:
            for entry in entries:
                raw = os.pread(fd, 4, entry.begin)
                if len(raw) == 4:
                    out[entry.name] = struct.unpack("<f", raw)[0]
        finally:
            os.close(fd)
    return out


def _pairs(ctx: EngineContext) -> list[tuple[int, int, str, str, Any]]:
    """(layer, expert, gate module, up module, scheme) for NVFP4 per-expert routed experts."""
    facts = ctx.facts
    if facts is None:
        return []
    out = []
    for layer in facts.moe_layers:
        if layer.naming.routed_layout != "per_expert":
            continue
        # vLLM resolves the scheme once per FusedMoE layer (expert 0 stands for all)
        scheme = ctx.scheme_of(layer.routed_weight(0, "gate"))
        if scheme is None or scheme.format is not WeightFormat.NVFP4:
            continue
        for e in range(layer.n_routed):
            gate, up = layer.routed_module(e, "gate"), layer.routed_module(e, "up")
            out.append((layer.layer, e, gate, up, scheme))
    return out


def _compare(
    rule: RuleSpec, pairs: list, values: dict[str, float], suffix_of: Callable[[Any], str | None]
) -> list[EngineFinding]:
    bad: list[tuple[float, int, int, str, str]] = []
    suffixes: set[str] = set()
    for layer, e, gate, up, scheme in pairs:
        suffix = suffix_of(scheme)
        if not suffix:
            continue
        a, b = values.get(f"{gate}.{suffix}"), values.get(f"{up}.{suffix}")
        if a is None or b is None:
            continue
        if abs(a - b) > ATOL + RTOL * abs(b):
            rel = abs(a - b) / max(abs(a), abs(b))
            bad.append((rel, layer, e, f"{gate}.{suffix}", f"{up}.{suffix}"))
            suffixes.add(suffix)
    if not bad:
        return []
    worst = max(bad)
    layers = sorted({b[1] for b in bad})
    return [
        rule.finding(
            tensors=[n for b in bad for n in b[3:]],
            layers=layers,
            count=len(bad),
            suffix="/".join(sorted(suffixes)),
            max_rel=worst[0],
            worst=f"layer {worst[1]} expert {worst[2]}",
            details={
                "max_rel": worst[0],
                "worst": {"layer": worst[1], "expert": worst[2], "gate": worst[3], "up": worst[4]},
                "experts": [
                    {"layer": b[1], "expert": b[2], "rel": b[0]} for b in sorted(bad)[-50:]
                ],
            },
        )
    ]


def check_nvfp4(ctx: EngineContext, rules: dict[str, RuleSpec]) -> list[EngineFinding]:
    """Findings of the NVFP4 global-scale rules active in ``rules``."""
    active = [r for r in NVFP4_RULES if r in rules]
    if not active:
        return []
    pairs = _pairs(ctx)
    if not pairs:
        return []
    names = []
    for _l, _e, gate, up, s in pairs:
        for suffix in (s.global_scale_suffix, s.input_scale_suffix):
            if suffix:
                names += [f"{gate}.{suffix}", f"{up}.{suffix}"]
    values = read_f32_scalars(ctx.catalog, names)
    out: list[EngineFinding] = []
    if "nvfp4_gate_up_global_scale" in rules:
        out += _compare(
            rules["nvfp4_gate_up_global_scale"], pairs, values, lambda s: s.global_scale_suffix
        )
    if "nvfp4_gate_up_input_scale" in rules:
        out += _compare(
            rules["nvfp4_gate_up_input_scale"], pairs, values, lambda s: s.input_scale_suffix
        )
    return out
