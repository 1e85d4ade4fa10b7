"""vLLM's name matching for quantization configs, on the raw ``quantization_config`` dict.

The FSE gate (``fse_gates``) asks vLLM's own questions with vLLM's own answers, so it reads
config.json the way vLLM does (not through ckpt's normalising config models):

- ``quark_ignored`` mirrors ``should_ignore_layer`` (quantization/quark/utils.py): with
  ``children`` (a FusedMoE layer) any exclude entry naming the layer or a child
  (``X.experts.7.down_proj``) excludes it; then ``find_matching_patterns``
  (utils/config_utils.py): an entry equal to the name or a ``re:`` entry by ``re.match``; a
  fused name (``gate_up_proj``) matched directly wins, else each shard (``gate_proj``,
  ``up_proj``) is matched and shards that disagree raise ``ValueError``;
- ``quark_layer_config`` mirrors ``QuarkConfig.get_layer_quant_config_from_name`` (quark.py):
  ``layer_quant_config`` in dict order, a key without ``*`` matching when the name is a
  *substring* of the key, a key with ``*`` by ``fnmatch``; no FusedMoE probing;
- ``fp8_skipped`` mirrors ``is_layer_skipped`` (utils/quant_utils.py, ``match_mode="exact"``,
  as ``Fp8Config`` uses it): fused names by shard (disagreeing shards raise), and any name
  containing ``experts`` is skipped when an ``experts`` entry *contains* it.

``PACKED`` is ``DeepseekV2ForCausalLM.packed_modules_mapping`` with ``q_lora_rank`` set
(models/deepseek_v2.py), which vLLM hands to the quant config before building layers.

Example::

    quark_ignored("model.layers.3.mlp.shared_experts.gate_up_proj",
                  ["model.layers.3.mlp.shared_experts.gate_proj"])
    # VllmRaises: Found different quantization schemes for the shards of ...
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from typing import Any

PACKED: dict[str, list[str]] = {
    "gate_up_proj": ["gate_proj", "up_proj"],
    "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"],
}


class VllmRaises(Exception):
    """vLLM raises here (the text is vLLM's message) instead of answering."""


def _equal_or_re(value: str, target: str) -> bool:
    if target.startswith("re:"):
        return re.match(target[3:], value) is not None
    return target == value


def _shards(name: str, packed: Mapping[str, list[str]]) -> list[str] | None:
    proj = name.rsplit(".", 1)[-1]
    if proj not in packed:
        return None
    return [name.replace(proj, shard) for shard in packed[proj]]


def matching_patterns(
    name: str, patterns: Sequence[str], packed: Mapping[str, list[str]] = PACKED
) -> list[set[str]]:
    """One set of matching entries for ``name``, or one per shard of a fused name."""
    direct = {p for p in patterns if _equal_or_re(name, p)}
    if direct:
        return [direct]
    shards = _shards(name, packed)
    if shards is None:
        return [set()]
    return [{p for p in patterns if _equal_or_re(s, p)} for s in shards]


def quark_ignored(
    name: str,
    exclude: Sequence[str],
    packed: Mapping[str, list[str]] = PACKED,
    *,
    children: bool = False,
) -> bool:
    """Does Quark's ``exclude`` leave vLLM layer ``name`` unquantized?"""
    if children and any(
        t == name or t.startswith(name + ".") for t in exclude if not t.startswith("re:")
    ):
        return True
    hits = [bool(m) for m in matching_patterns(name, exclude, packed)]
    if any(hits) and not all(hits):
        raise VllmRaises(
            f"Found different quantization schemes for the shards of {name}. vLLM requires "
            "all to use the same scheme."
        )
    return all(hits)


def quark_layer_config(
    name: str, layer_quant_config: Mapping[str, Any], packed: Mapping[str, list[str]] = PACKED
) -> Any:
    """The ``layer_quant_config`` entry vLLM finds for ``name`` (None: none matches)."""
    shards = _shards(name, packed)
    if shards is not None:
        found = [
            c
            for s in shards
            if s != name and (c := quark_layer_config(s, layer_quant_config, packed)) is not None
        ]
        if found and any(c != found[0] for c in found):
            raise VllmRaises(
                f"Found a different quantization configuration for {packed[name.rsplit('.', 1)[-1]]} "
                f"in {name}. vLLM requires all to use the same scheme."
            )
        return found[0] if found else None
    for key, config in layer_quant_config.items():
        hit = name in key if "*" not in key else fnmatch.fnmatch(name, key)
        if hit:
            return config
    return None


def fp8_skipped(
    name: str, ignored: Sequence[str], packed: Mapping[str, list[str]] = PACKED
) -> bool:
    """Does ``Fp8Config``'s ``ignored_layers`` leave vLLM layer ``name`` unquantized?"""
    shards = _shards(name, packed)
    if shards is not None:
        if name in ignored:
            return True
        states = {s in ignored for s in shards}
        if len(states) > 1:
            raise VllmRaises(
                f"Detected some but not all shards of {name} are quantized. All shards of "
                "fused layers to have the same precision."
            )
        return states.pop()
    if "experts" in name:
        return any(name in entry for entry in ignored if "experts" in entry)
    return name in ignored
