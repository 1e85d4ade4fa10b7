"""Engine-test helpers: decide the policy + build the engine section, group findings by rule."""

from __future__ import annotations

from pathlib import Path

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.errors import CkptError
from checkpoint_tool.policy import decide_policy
from checkpoint_tool.policy.engine.build import build_engine_report


def engine(path: Path, *, tp: int = 1, target: str | None = None, table=None, **opts):
    """Policy decision (when ckpt can decide one) + engine section for ``path``."""
    cat = open_catalog(path)
    tgt = table.target(target) if table is not None else target
    try:
        pol = decide_policy(
            cat,
            target=tgt,
            tp=tp,
            ep=opts.get("ep", False),
            eplb=opts.get("eplb", False),
            all2all=opts.get("all2all"),
        )
    except CkptError:
        pol = None
    return build_engine_report(
        cat,
        pol,
        target,
        tp,
        opts.get("moe_backend"),
        opts.get("ep", False),
        opts.get("eplb", False),
        opts.get("all2all"),
        table=table,
    )


def by_rule(report) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in report.findings:
        out.setdefault(f.rule, []).append(f)
    return out


def moe_layers(path: Path) -> list[int]:
    """MoE layer indices of a checkpoint per config.json (the test's own expectation source)."""
    from checkpoint_tool.model import model_facts

    cat = open_catalog(path)
    return [m.layer for m in model_facts(cat.config, cat.tensors).moe_layers]
