"""``build_engine_report``: what the target engine will do with a checkpoint, from headers.

Steps: load the rule table, pick the target, keep the rules whose engine and version range
cover it, build the ``EngineContext`` once, run each rule family's check (config shape,
scheme detection, name matching, NVFP4 global scales, TP geometry, FSE), order the findings
(errors first) and summarise. Only NVFP4 0-d scale tensors are read (4 bytes each).

Example::

    report = build_engine_report(catalog, decide_policy(catalog, tp=8), "vllm-0.33", tp=8,
                                 moe_backend="marlin")
    report.summary.text
    # 'vllm-0.33: will refuse to load (2 errors, 1 warning)'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from . import checks_config
from .checks_fse import FSE_RULES, check_fse
from .checks_model import MODEL_RULES, check_model
from .checks_names import NAME_RULES, check_names
from .checks_nvfp4 import NVFP4_RULES, check_nvfp4
from .checks_schemes import SCHEME_RULES, check_schemes
from .checks_tp import TP_RULES, check_tp
from .context import EngineContext, ServeOptions
from .model import EngineFinding, EngineReport, EngineSummary, RuleSpec, RuleTable, load_rule_table

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.policy.decision import PolicyDecision

GroupCheck = Callable[[EngineContext, dict[str, RuleSpec]], list[EngineFinding]]


def _single(
    fn: Callable[[EngineContext, RuleSpec], list[EngineFinding]], rule_id: str
) -> GroupCheck:
    def run(ctx: EngineContext, rules: dict[str, RuleSpec]) -> list[EngineFinding]:
        return fn(ctx, rules[rule_id]) if rule_id in rules else []

    return run


#: (rule ids a check covers, the check) -- every rule id of the table must appear once
CHECK_FAMILIES: list[tuple[tuple[str, ...], GroupCheck]] = [
    *(((rid,), _single(fn, rid)) for rid, fn in checks_config.CHECKS.items()),
    (SCHEME_RULES, check_schemes),
    (NAME_RULES, check_names),
    (NVFP4_RULES, check_nvfp4),
    (TP_RULES, check_tp),
    (FSE_RULES, check_fse),
    (MODEL_RULES, check_model),
]

_ORDER = {"error": 0, "warning": 1, "info": 2}


def implemented_rule_ids() -> set[str]:
    """Every rule id some check implements."""
    return {rid for ids, _ in CHECK_FAMILIES for rid in ids}


def build_engine_report(
    catalog: Catalog,
    decision: PolicyDecision | None = None,
    target: str | None = None,
    tp: int = 1,
    moe_backend: str | None = None,
    ep: bool = False,
    eplb: bool = False,
    all2all: str | None = None,
    *,
    table: RuleTable | None = None,
) -> EngineReport:
    """The engine section for ``catalog`` served by ``target`` (None: the newest supported).

    ``decision`` is the ``PolicyDecision`` of the same catalog and options (its resolved
    schemes, model facts, per-layer FSE decisions and structure findings; None when ckpt
    cannot decide one: the config is then parsed here); ``table`` replaces the bundled rule
    table (tests).
    """
    table = table or load_rule_table()
    tgt = table.target(target)
    active = {r.id: r for r in table.rules_for(tgt)}
    options = ServeOptions(tp=tp, moe_backend=moe_backend, ep=ep, eplb=eplb, all2all=all2all)
    ctx = EngineContext.build(catalog, decision, tgt, options)
    findings: list[EngineFinding] = []
    for ids, check in CHECK_FAMILIES:
        subset = {i: active[i] for i in ids if i in active}
        if subset:
            findings += check(ctx, subset)
    findings.sort(key=lambda f: (_ORDER[f.severity], f.rule, f.layers, f.modules))
    return EngineReport(
        target=tgt.name,
        engine=tgt.engine,
        version=tgt.version,
        tp=tp,
        moe_backend=moe_backend,
        ep=ep,
        eplb=eplb,
        all2all=all2all,
        findings=findings,
        rules_checked=list(active),
        summary=summarize(tgt.name, findings),
    )


def summarize(target: str, findings: list[EngineFinding]) -> EngineSummary:
    """Counts and one line, e.g. ``vllm-0.33: loads, but 2 warning(s) differ from the file``."""
    n = {s: sum(f.severity == s for f in findings) for s in _ORDER}
    if n["error"]:
        text = f"{target}: will refuse to load or crash ({n['error']} error(s), {n['warning']} warning(s))"
    elif n["warning"]:
        text = f"{target}: loads, but {n['warning']} warning(s): the engine differs from the producer's intent"
    else:
        text = f"{target}: loads as the producer intended"
    return EngineSummary(
        errors=n["error"],
        warnings=n["warning"],
        infos=n["info"],
        will_load=not n["error"],
        text=text,
    )
