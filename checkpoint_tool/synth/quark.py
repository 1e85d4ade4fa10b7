"""Quark ``quantization_config`` builders from real Quark 0.13 spec dicts.

``quark_specs.json`` holds the spec dicts Quark 0.13 wrote (copied from the producer fixtures,
so the package does not depend on ``tests/``) plus the top-level keys every Quark 0.13 export
carries (``algo_config``, ``export``, ``quant_mode``, ``version``, ...).

Example::

    quark_config(global_spec="mxfp4", exclude=["lm_head"],
                 layer_specs={"*self_attn*": "fp8_per_channel"})
    # {"algo_config": None, "exclude": ["lm_head"], "export": {...},
    #  "global_quant_config": {"weight": {"dtype": "fp4", "qscheme": "per_group", ...}, ...},
    #  "layer_quant_config": {"*self_attn*": {...}}, "quant_method": "quark", ...}
"""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import resources


@cache
def _specs_doc() -> dict:
    text = resources.files("checkpoint_tool.synth").joinpath("quark_specs.json").read_text()
    return json.loads(text)


def quark_spec(name: str) -> dict:
    """A fresh copy of one named Quark spec (``mxfp4``, ``fp8_per_block``, ``nvfp4``, ...)."""
    return copy.deepcopy(_specs_doc()["specs"][name])


def quark_config(
    *,
    global_spec: str,
    exclude: list[str],
    layer_specs: dict[str, str] | None = None,
) -> dict:
    """A complete Quark 0.13 ``quantization_config``; ``layer_specs`` maps pattern -> spec name.

    ``layer_specs`` keeps insertion order: Quark resolves fnmatch keys in dict order.
    """
    cfg = copy.deepcopy(_specs_doc()["skeleton"])
    cfg["global_quant_config"] = quark_spec(global_spec)
    cfg["layer_quant_config"] = {k: quark_spec(v) for k, v in (layer_specs or {}).items()}
    cfg["exclude"] = list(exclude)
    return dict(sorted(cfg.items()))
