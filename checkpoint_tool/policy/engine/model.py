"""Engine rules and targets as data (``rules.yaml``), and the report they produce.

A ``Target`` is one engine release (``vllm-0.33``); a ``RuleSpec`` is one row of the rule
table: id, engine, version range, severity, the upstream file it mirrors, the engine's own
message and ckpt's explanation (both templates). ``RuleSpec.finding(...)`` fills them into an
``EngineFinding``; ``EngineReport`` is the ``engine`` section of ``ckpt inspect --format json``.

Example::

    table = load_rule_table()
    target = table.target("vllm-0.33")
    [r.id for r in table.rules_for(target)][:2]
    # ['config_unknown_quant_method', 'quark_export_missing']
    table.rule("quark_export_missing").finding(target=target.name)
    # EngineFinding(rule='quark_export_missing', severity='error', upstream='The export key ...')
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from checkpoint_tool.errors import UsageError
from checkpoint_tool.yamlio import safe_load

EngineSeverity = Literal["error", "warning", "info"]

#: most modules / tensors listed in one finding (the total is in ``modules_total``)
MAX_LISTED = 50

_VERSION_RE = re.compile(r"^\s*(>=|<=|==|>|<)\s*(\d+(?:\.\d+)*)\s*$")


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.33.0"`` -> ``(0, 33, 0)``."""
    return tuple(int(p) for p in str(text).split("."))


def version_in_range(version: str, spec: str) -> bool:
    """Is ``version`` inside ``spec`` (comma-separated ``>=``/``<``/``==`` clauses)?

    ``version_in_range("0.33.0", ">=0.33,<0.34")`` -> True. Versions compare as integer
    tuples padded with zeros (``0.33`` == ``0.33.0``).
    """
    v = parse_version(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = _VERSION_RE.match(clause)
        if m is None:
            raise ValueError(f"bad version clause {clause!r} in {spec!r}")
        op, ref = m.group(1), parse_version(m.group(2))
        width = max(len(v), len(ref))
        a, b = v + (0,) * (width - len(v)), ref + (0,) * (width - len(ref))
        ok = {
            ">=": a >= b,
            "<=": a <= b,
            "==": a == b,
            ">": a > b,
            "<": a < b,
        }[op]
        if not ok:
            return False
    return True


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Target(_Frozen):
    """One engine release and its facts that are data."""

    name: str
    engine: str
    version: str
    quant_methods: tuple[str, ...] = ()
    #: --moe-backend -> per-rank intermediate round-up of the MXFP4 MoE path
    mxfp4_round_up: dict[str, int] = Field(default_factory=dict)
    mxfp4_round_up_rocm_default: int = 256
    #: what the engine fuses when it loads a checkpoint: "none" (stock CUDA / CPU builds: FSE
    #: is a ROCm AITER feature, off unless asked for), "all_or_nothing" (0.33 with AITER FSE
    #: on: every MoE layer or none), "per_layer" (an engine with per-layer FSE)
    fse: Literal["none", "all_or_nothing", "per_layer"] = "none"
    #: the device the target stands for ("cuda", "rocm", "cpu")
    device: str = "cuda"
    #: engine settings the output needs on this target, e.g. ["VLLM_ROCM_USE_AITER=1"]
    env: tuple[str, ...] = ()
    #: the engine's parameter spec directory (``checkpoint_tool/targets/<spec>``)
    spec: str = ""
    #: one line for the docs and the convert summary
    description: str = ""

    @property
    def fuses(self) -> bool:
        """Does the engine fuse shared experts at all when it loads a checkpoint?"""
        return self.fse != "none"


class EngineFinding(_Frozen):
    """One thing the engine will do differently from the producer's intent, or refuse."""

    rule: str
    severity: EngineSeverity
    message: str
    #: the engine's own words (exception or log line), None when it says nothing
    upstream: str | None = None
    #: the engine source file the rule mirrors
    source: str
    modules: list[str] = Field(default_factory=list)
    #: number of modules concerned (``modules`` lists at most MAX_LISTED of them)
    modules_total: int = 0
    tensors: list[str] = Field(default_factory=list)
    layers: list[int] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)

    def line(self) -> str:
        """``error [rule] message (vLLM: "upstream")``."""
        up = f' (engine: "{self.upstream}")' if self.upstream else ""
        return f"{self.severity} [{self.rule}] {self.message}{up}"


class RuleSpec(_Frozen):
    """One row of the rule table."""

    id: str
    engine: str
    versions: str
    severity: EngineSeverity
    source: str
    #: the function(s) in ``source`` (and files next to it) the rule mirrors, e.g.
    #: ``"DeepseekV2MoE.__init__; DeepseekV2Model.load_weights"``
    function: str | None = None
    upstream: str | None = None
    message: str
    title: str
    note: str | None = None
    #: False where the upstream string/behaviour could not be found in the stored source
    verified: bool = True

    def applies_to(self, target: Target) -> bool:
        return self.engine == target.engine and version_in_range(target.version, self.versions)

    def finding(
        self,
        *,
        modules: list[str] | None = None,
        tensors: list[str] | None = None,
        layers: list[int] | None = None,
        details: dict[str, Any] | None = None,
        severity: EngineSeverity | None = None,
        **params: Any,
    ) -> EngineFinding:
        """The finding with ``params`` filled into the message and upstream templates."""
        mods = sorted(set(modules or []))
        fmt = {"layers": sorted(set(layers or [])), **params}
        return EngineFinding(
            rule=self.id,
            severity=severity or self.severity,
            message=self.message.format(**fmt),
            upstream=self.upstream.format(**fmt) if self.upstream else None,
            source=self.source,
            modules=mods[:MAX_LISTED],
            modules_total=len(mods),
            tensors=sorted(set(tensors or []))[:MAX_LISTED],
            layers=sorted(set(layers or [])),
            details=details or {},
        )


class RuleTable(_Frozen):
    """All targets and rules of ``rules.yaml``."""

    default_target: str
    targets: dict[str, Target]
    rules: tuple[RuleSpec, ...]

    def target(self, name: str | None) -> Target:
        """The target named ``name`` (None: the default, the newest supported)."""
        key = name or self.default_target
        if key not in self.targets:
            raise UsageError(
                f"--target {key!r} is not a known engine target; use one of "
                f"{', '.join(sorted(self.targets))}"
            )
        return self.targets[key]

    def rule(self, rule_id: str) -> RuleSpec:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)

    def rules_for(self, target: Target) -> list[RuleSpec]:
        return [r for r in self.rules if r.applies_to(target)]


class EngineSummary(_Frozen):
    errors: int = 0
    warnings: int = 0
    infos: int = 0
    #: False when a finding is an error (the engine refuses or crashes)
    will_load: bool = True
    text: str = ""


class EngineReport(_Frozen):
    """The ``engine`` section of ``ckpt inspect --format json``: what the target engine does."""

    target: str
    engine: str
    version: str
    tp: int = 1
    moe_backend: str | None = None
    ep: bool = False
    eplb: bool = False
    all2all: str | None = None
    findings: list[EngineFinding] = Field(default_factory=list)
    #: rule ids evaluated for this target (in table order)
    rules_checked: list[str] = Field(default_factory=list)
    summary: EngineSummary = Field(default_factory=EngineSummary)

    @property
    def has_errors(self) -> bool:
        return any(f.severity == "error" for f in self.findings)


def table_from_dict(data: dict[str, Any]) -> RuleTable:
    """Build a ``RuleTable`` from the parsed YAML (targets keyed by name)."""
    targets = {n: Target(name=n, **t) for n, t in (data.get("targets") or {}).items()}
    rules = tuple(RuleSpec(**r) for r in data.get("rules") or [])
    ids = [r.id for r in rules]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"duplicate rule ids in the rule table: {dup}")
    return RuleTable(default_target=data["default_target"], targets=targets, rules=rules)


@functools.lru_cache(maxsize=1)
def load_rule_table() -> RuleTable:
    """The bundled rule table (``checkpoint_tool/policy/engine/rules.yaml``)."""
    text = resources.files("checkpoint_tool.policy.engine").joinpath("rules.yaml").read_text()
    return table_from_dict(safe_load(text))
