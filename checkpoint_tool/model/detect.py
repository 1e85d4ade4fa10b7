"""``model_facts``: the entry point from config.json (and tensor names) to ``ModelFacts``.

Example::

    facts = model_facts(catalog.config, catalog.tensors)
    facts.family, facts.moe_layer_indices[:3]     # ("deepseek_v3", [3, 4, 5])
    facts.moe_layers[0].routed_module(0, "down")  # "model.layers.3.mlp.experts.0.down_proj"
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from checkpoint_tool.model.config_checks import check_config
from checkpoint_tool.model.facts import ModelFacts
from checkpoint_tool.model.families import FAMILIES, family_of, generic
from checkpoint_tool.model.families.common import build_facts


def model_facts(
    config: dict[str, Any] | None,
    tensor_names: Iterable[str] | None = None,
    *,
    tensor_shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> ModelFacts:
    """Facts for a model. Families of the table read config.json (the tensor names, when given,
    only decide the spelling of each layer's experts); unknown ones fall back to ``generic``, which
    infers MoE layers from the names (and ``tensor_shapes`` for sizes). A set or a mapping of
    the names (a catalog's ``tensors``) is asked as it is; other iterables are made a set.
    config.json's sizes are range-checked first (``config_checks``)."""
    check_config(config)
    names: Collection[str] | None
    if tensor_names is None or isinstance(tensor_names, (AbstractSet, Mapping)):
        names = tensor_names
    else:
        names = set(tensor_names)
    family = family_of(config)
    if family == "generic":
        return generic.build(config, names, tensor_shapes)
    return build_facts(FAMILIES[family], config or {}, names)
