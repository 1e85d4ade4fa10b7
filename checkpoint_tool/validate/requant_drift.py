"""The drift check on an output whose shared experts ``ckpt convert --requantize-shared`` wrote as
MXFP4: those layers' shared-expert and FSE decisions changed on purpose.

``config.json["ckpt"]["requantized_shared"]`` says which layers (``layers`` requantized,
``requested`` also those already MXFP4, which fuse with them on an all-or-nothing target). For them, a policy
that differs from the expected one only in ``shared.*`` / ``shared_intermediate.*`` / ``fse.*`` decisions (the scheme became
mxfp4, the layer fuses) is a ``warning`` finding that names the requantization; any other change
on them, and every change on other layers, stays an error.

Example finding::

    Issue(severity="warning", rule="policy_drift_requantized", tensor="model.layers.1.mlp",
          message="MoE layer 1: shared expert requantized to MXFP4 by ckpt convert "
                  "(config.json ckpt.requantized_shared): shared.format: unquantized -> ...")
"""

from __future__ import annotations

from typing import Any

from checkpoint_tool.report import Issue
from checkpoint_tool.validate.decisions import decisions

#: decision prefixes a requantization changes
REQUANT_KEYS = ("shared.", "shared_intermediate.", "fse.")


def requantized_layers(config: dict[str, Any] | None) -> set[int]:
    meta = (config or {}).get("ckpt")
    rec = meta.get("requantized_shared") if isinstance(meta, dict) else None
    if not isinstance(rec, dict):
        return set()
    layers = [*(rec.get("layers") or []), *(rec.get("requested") or [])]
    return {int(n) for n in layers}


def split_requantized(
    expected: Any, actual: Any, config: dict[str, Any] | None
) -> tuple[Any, Any, list[Issue]]:
    """``(expected, actual)`` with the requantized layers' explained changes taken out, and the
    ``info`` findings for them. ``expected`` / ``actual``: ``PolicyReport``s."""
    layers = requantized_layers(config)
    if not layers:
        return expected, actual, []
    exp = {m.layer: m for m in expected.moe_layers}
    act = {m.layer: m for m in actual.moe_layers}
    infos: list[Issue] = []
    keep_exp, keep_act = [], []
    for idx in sorted(set(exp) | set(act)):
        e, a = exp.get(idx), act.get(idx)
        if idx in layers and e is not None and a is not None:
            de, da = decisions(e), decisions(a)
            changed = [k for k in sorted(set(de) | set(da)) if de.get(k) != da.get(k)]
            if changed and all(k.startswith(REQUANT_KEYS) for k in changed):
                shown = "; ".join(f"{k}: {de.get(k)} -> {da.get(k)}" for k in changed[:4])
                more = f"; +{len(changed) - 4} more" if len(changed) > 4 else ""
                infos.append(
                    Issue(
                        severity="warning",
                        rule="policy_drift_requantized",
                        tensor=a.prefix,
                        message=f"MoE layer {idx}: shared expert requantized to MXFP4 by ckpt "
                        f"convert (config.json ckpt.requantized_shared): {shown}{more}",
                    )
                )
                continue
        if e is not None:
            keep_exp.append(e)
        if a is not None:
            keep_act.append(a)
    return (
        expected.model_copy(update={"moe_layers": keep_exp}),
        actual.model_copy(update={"moe_layers": keep_act}),
        infos,
    )
