"""The spec's view of an output: every key and per-rank storage shape, from config.json alone.

Evaluates the target spec (sites from the *written* config.json, parameter lists per scheme,
shapes per codec) without the planner, so tests can compare the files the planner and
executor produced with what the spec says vLLM's model holds.
"""

from __future__ import annotations

import json
from pathlib import Path

from checkpoint_tool.model import model_facts
from checkpoint_tool.quant.codecs import get_codec
from checkpoint_tool.quant.resolve import resolve_catalog
from checkpoint_tool.targets import load_spec
from checkpoint_tool.targets.instance import instantiate
from checkpoint_tool.targets.keys import KeyResolver
from checkpoint_tool.targets.shapes import (
    linear_shapes,
    moe_shapes,
    required,
    scheme_params,
    vocab_shape,
)


def expected_params(cat, plan, dst: Path) -> dict[str, tuple[int, ...]]:  # type: ignore[no-untyped-def]
    """``{state-dict key: per-rank storage shape}`` the spec requires for this conversion."""
    config = json.loads((dst / "config.json").read_text())
    spec = load_spec(model_facts(config).family)
    # vLLM serves a folder with hf_quant_config.json through ModelOpt, which adds KV-cache
    # scale Parameters on every attention (modelopt.py get_quant_method, kv_cache.py)
    modelopt = (dst / "hf_quant_config.json").exists()
    inst = instantiate(spec, {**config, "quant_family": "modelopt" if modelopt else None}, plan.fse_layers)
    keys = KeyResolver(spec)
    schemes = resolve_catalog(cat).tensors
    facts = {layer.layer: layer for layer in model_facts(config, cat.tensors).moe_layers}
    tp = plan.options.tp
    out: dict[str, tuple[int, ...]] = {}
    for v in inst.vocabs:
        out[keys.key(v.vllm, "weight")] = vocab_shape(v, spec.vocab_padding, tp)
    for p in inst.params:
        for name, shape in p.params:
            out[keys.key(p.vllm, name)] = shape
    for site in inst.linears:
        scheme = schemes[f"{site.shards[0][0]}.weight"].scheme
        params = required(scheme_params(spec, scheme, site.vllm), scheme, "linear")
        for name, shape in linear_shapes(site, get_codec(scheme), tp, params).items():
            out[keys.key(site.vllm, name)] = shape
    for site in inst.moes:
        weight = f"{facts[site.layer].routed_module(0, 'gate')}.weight"
        scheme = schemes[weight].scheme
        sp = scheme_params(spec, scheme, site.vllm)
        params = required(sp, scheme, "moe")
        shapes = moe_shapes(site, spec, get_codec(scheme), tp, params, sp.per_expert)
        for name, shape in shapes.items():
            out[keys.key(site.vllm, name)] = shape
    for b in inst.buffers:
        out[b.name] = b.shape
    return out
