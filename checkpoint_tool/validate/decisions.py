"""A policy layer's comparable decisions, flattened: what the drift checks compare.

``decisions`` turns one ``MoeLayerPolicy`` into dotted keys (schemes, layouts, expert counts and
widths, FSE on/off with its code and slots, TP geometry and padding), leaving out the
explanatory fields whose wording may change between versions.

Example::

    decisions(report.moe_layers[0])
    # {"layer": 1, "fse.enabled": True, "fse.code": "ok", "shared.format": "mxfp4", ...}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from checkpoint_tool.policy.report import MoeLayerPolicy

#: explanatory fields: their text may change between versions without a decision changing
WORDING_FIELDS = {"rule", "reason", "reason_template", "alignment_from", "source"}


def decisions(layer: MoeLayerPolicy) -> dict[str, Any]:
    """The comparable decisions of one ``MoeLayerPolicy``, flattened to dotted keys."""
    return _flatten(layer.model_dump(mode="json"))


def _flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in WORDING_FIELDS:
                continue
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict):
                out.update(_flatten(v, key))
            else:
                out[key] = v
    return out
