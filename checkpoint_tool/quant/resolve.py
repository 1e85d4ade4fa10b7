"""Resolve every tensor of a checkpoint to a role and a quantization scheme, with findings.

``load_quant_config`` picks the config model from config.json (and hf_quant_config.json);
``resolve_tensor`` answers for one name; ``resolve_catalog`` answers for a whole catalog and
checks what the config implies against the headers: unexplained tensors, missing scales,
scales of the wrong dtype/shape, packed shards with different schemes.

Example::

    rc = resolve_catalog(open_catalog("/models/quark-mxfp4"))
    t = rc.tensors["model.layers.1.mlp.experts.0.down_proj.weight_scale"]
    t.role, t.scheme.short(), t.scheme.rule
    # ('scale', 'mxfp4/32', "vllm: global_quant_config on FusedMoE layer 'model.layers.1.mlp.experts'")
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ValidationError

from checkpoint_tool.catalog.bulk import gc_paused
from checkpoint_tool.errors import InputError
from checkpoint_tool.forked import Forked, can_fork
from checkpoint_tool.quant.configs import (
    DeepSeekFp8Config,
    DeepSeekV4Config,
    ModelOptConfig,
    NoQuantConfig,
    QuantConfig,
    QuarkConfig,
)
from checkpoint_tool.quant.configs.base import FLOAT_DTYPES, unquantized
from checkpoint_tool.quant.configs.names import (
    PACKED_SHARD_NAMES,
    expert_key,
    non_linear_reason,
    packed_siblings,
    split_tensor_name,
)
from checkpoint_tool.quant.configs.shapes import expected_siblings, weight_shape_problem
from checkpoint_tool.quant.roles import ROLE_BY_SUFFIX, SCALE_ROLES, Role
from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.report import Issue

__all__ = [
    "ResolvedCatalog",
    "ResolvedTensor",
    "Role",
    "SchemeDifference",
    "load_quant_config",
    "resolve_catalog",
    "resolve_tensor",
    "scheme_differences",
    "split_tensor_name",
]

Semantics = Literal["vllm", "producer"]

#: Quark leaves fused 3-D expert parameters (``X.experts.gate_up_proj`` [E, 2I, H],
#: ``X.experts.down_proj`` [E, H, I]) unquantized in BF16
FUSED_EXPERT_PARAMS = ("gate_up_proj", "down_proj")
FUSED_EXPERT_SUFFIXES = tuple(f".experts.{p}" for p in FUSED_EXPERT_PARAMS)
SUPPORTED_METHODS = ("fp8", "quark", "modelopt", "deepseek_v4_fp8")


class ResolvedTensor(NamedTuple):
    """One tensor's module, role and the scheme of its module (with the rule that matched).

    A named tuple: a catalog resolves ~100k of them per checkpoint, and one is built in half
    the time of a frozen dataclass.
    """

    name: str
    module: str
    role: Role
    scheme: Scheme


class SchemeDifference(BaseModel):
    """A module vLLM resolves differently from the producer."""

    module: str
    vllm: Scheme
    producer: Scheme


@dataclass
class ResolvedCatalog:
    """``tensors``: name -> ResolvedTensor for every tensor; ``issues``: what does not fit.

    On a large catalog the per-module checks may still be running in a forked child when
    ``resolve_catalog`` returns; reading ``issues`` waits for them (``_pending``).
    """

    qconfig: Any
    tensors: dict[str, ResolvedTensor]
    _issues: list[Issue] = field(default_factory=list, repr=False)
    _pending: Callable[[], list[Issue]] | None = field(default=None, repr=False)

    @property
    def issues(self) -> list[Issue]:
        """Every finding, errors first, then by file, tensor and rule."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._issues.extend(pending())
            self._issues.sort(key=_issue_order)
        return self._issues

    def weights(self) -> dict[str, ResolvedTensor]:
        """Module -> its resolved ``.weight`` (or fused expert parameter)."""
        return {t.module: t for t in self.tensors.values() if t.role == "weight"}

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]


# -- config loading ----------------------------------------------------------------------------


def load_quant_config(
    config: dict | None, hf_quant_config: dict | None = None, *, where: str = "config.json"
) -> QuantConfig:
    """The config model for a checkpoint: ``config`` is config.json (or a bare quant config).

    Raises ``InputError`` for an unsupported ``quant_method`` or a malformed config.
    """
    try:
        return _load(config or {}, hf_quant_config, where)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InputError(
            f"{where}: quantization config is malformed at {loc or 'top level'}: {err['msg']}; "
            "fix the config or regenerate the checkpoint"
        ) from None


def _load(config: dict, hf_quant: dict | None, where: str) -> QuantConfig:
    if hf_quant and isinstance(hf_quant.get("quantization"), dict):
        return ModelOptConfig.from_hf_quant_config(hf_quant)
    qc = config.get("quantization_config") if "quant_method" not in config else config
    if qc is None:
        return NoQuantConfig()
    if not isinstance(qc, dict):
        raise InputError(f"{where}: quantization_config is not an object")
    method = str(qc.get("quant_method", "")).lower()
    if method in ("fp8", "deepseek_v4_fp8"):
        model_type = str(config.get("model_type", ""))
        if model_type.startswith("deepseek_v4") or "expert_dtype" in config:
            return DeepSeekV4Config.model_validate(
                {**qc, "expert_dtype": config.get("expert_dtype", "fp4")}
            )
        return DeepSeekFp8Config.model_validate(qc)
    if method == "quark":
        return QuarkConfig.model_validate(qc)
    if method == "modelopt":
        return ModelOptConfig.from_inline(qc)
    raise InputError(
        f"{where}: quantization_config.quant_method {qc.get('quant_method')!r} is not supported; "
        f"ckpt reads {', '.join(SUPPORTED_METHODS)}"
    )


# -- one tensor --------------------------------------------------------------------------------


def _is_lm_head(module: str) -> bool:
    return module in ("lm_head", "head") or module.endswith(".lm_head")


def _scheme(qconfig: QuantConfig, module: str, semantics: Semantics) -> Scheme:
    if semantics == "producer":
        return qconfig.producer_scheme_for(module)
    scheme = qconfig.scheme_for(module)
    if scheme.quantized and _is_lm_head(module):
        # vLLM builds the LM head as ParallelLMHead (not a LinearBase): Fp8Config, Quark and
        # ModelOpt all leave it unquantized whatever the config says
        rule = f"lm_head: vLLM loads it unquantized (ParallelLMHead); config says {scheme.short()}"
        return unquantized(qconfig.source, rule)
    return scheme


def resolve_tensor(
    qconfig: QuantConfig,
    name: str,
    *,
    dtype: str | None = None,
    shape: tuple[int, ...] | None = None,
    semantics: Semantics = "vllm",
    cache: dict[str, Scheme] | None = None,
) -> ResolvedTensor:
    """Role and scheme of one tensor name (``dtype``/``shape`` refine fused expert params).

    A fused 3-D expert parameter (``X.experts.gate_up_proj``) is its own module: its
    ``module`` is the full tensor name. ``cache`` (module, or FusedMoE layer and projection ->
    scheme) saves resolving a module once per sibling tensor and, under vLLM semantics, once
    per routed expert; pass one empty dict per config and semantics.
    """
    module, suffix = split_tensor_name(name)
    return _resolve_split(qconfig, name, module, suffix, dtype, shape, semantics, cache)


def _resolve_split(
    qconfig: QuantConfig,
    name: str,
    module: str,
    suffix: str,
    dtype: str | None,
    shape: tuple[int, ...] | None,
    semantics: Semantics,
    cache: dict | None,
) -> ResolvedTensor:
    """``resolve_tensor`` for a name already split into ``module`` and ``suffix``."""
    source = qconfig.source
    if suffix in FUSED_EXPERT_PARAMS and module.endswith(".experts"):
        if shape is None or len(shape) == 3:
            if dtype is None or dtype in FLOAT_DTYPES:
                configured = _scheme(qconfig, f"{module}.0.{suffix}", semantics)
                rule = (
                    f"fused 3-D expert parameter left in float by the producer "
                    f"(config alone would give {configured.short()}: {configured.rule})"
                )
                return ResolvedTensor(
                    name=name, module=name, role="weight", scheme=unquantized(source, rule)
                )
            scheme = _scheme(qconfig, f"{module}.0.{suffix}", semantics)
            return ResolvedTensor(name=name, module=name, role="weight", scheme=scheme)
    role = ROLE_BY_SUFFIX.get(suffix, "other")
    if role == "other":
        scheme = unquantized(source, f"parameter {suffix!r}: not a weight, stored as is")
        return ResolvedTensor(name=name, module=module, role=role, scheme=scheme)
    if cache is None:
        scheme = _module_scheme(qconfig, module, semantics)
    else:
        scheme = cache.get(module)
        if scheme is None:
            scheme = _cached_module_scheme(qconfig, module, semantics, cache)
    return ResolvedTensor(name, module, role, scheme)


def _module_scheme(qconfig: QuantConfig, module: str, semantics: Semantics) -> Scheme:
    """Scheme of the module holding a weight/scale/bias: lookup table, non-linear or config."""
    scheme = qconfig.table_scheme_for(module)
    if scheme is not None:
        return scheme
    reason = non_linear_reason(module)
    if reason is not None:
        return unquantized(qconfig.source, f"{reason}: never quantized")
    return _scheme(qconfig, module, semantics)


def _cached_module_scheme(
    qconfig: QuantConfig, module: str, semantics: Semantics, cache: dict
) -> Scheme:
    """``_module_scheme`` through ``cache``, resolving each FusedMoE projection once.

    Under vLLM semantics every routed expert ``X.experts.E.proj`` resolves through its FusedMoE
    layer (``QuantConfigBase.experts_resolve_by_layer``), and the rules above look only at the
    module's last component (``proj``) and its prefix: all E share the key ``(X.experts,
    proj)``. The producer resolved each module on its own (an exclude entry may name one
    expert), so producer semantics share nothing.
    """
    key = None
    if semantics == "vllm" and qconfig.experts_resolve_by_layer:
        key = expert_key(module)
    scheme = cache.get(key) if key is not None else None
    if scheme is None:
        scheme = _module_scheme(qconfig, module, semantics)
        if key is not None:
            cache[key] = scheme
    cache[module] = scheme
    return scheme


# -- vLLM vs producer --------------------------------------------------------------------------


def storage_key(scheme: Scheme) -> tuple:
    """What a scheme stores, without the explanation (rule/source)."""
    return (
        scheme.format,
        scheme.block,
        scheme.group_size,
        scheme.scale_suffix,
        scheme.global_scale_suffix,
        scheme.input_scale_suffix,
        repr(scheme.spec),
    )


def scheme_differences(qconfig: QuantConfig, modules: list[str]) -> list[SchemeDifference]:
    """Modules whose vLLM scheme differs from the producer's (sorted by module name)."""
    out = []
    for module in sorted(set(modules)):
        if non_linear_reason(module) is not None:
            continue
        a, b = _scheme(qconfig, module, "vllm"), qconfig.producer_scheme_for(module)
        if storage_key(a) != storage_key(b):
            out.append(SchemeDifference(module=module, vllm=a, producer=b))
    return out


# -- a whole catalog ---------------------------------------------------------------------------


def resolve_catalog(catalog: Any, *, semantics: Semantics = "vllm") -> ResolvedCatalog:
    """Resolve every tensor of ``catalog`` and report what the config does not explain."""
    where = str(catalog.root / "config.json")
    qconfig = load_quant_config(catalog.config, catalog.hf_quant_config, where=where)
    with gc_paused():  # ~92k resolved tensors and their groups for a full R1, no cycles
        return _resolve_catalog(catalog, qconfig, semantics)


def _resolve_catalog(catalog: Any, qconfig: QuantConfig, semantics: Semantics) -> ResolvedCatalog:
    cache: dict = {}
    tensors: dict[str, ResolvedTensor] = {}
    by_module: dict[str, dict[str, str]] = defaultdict(dict)
    role_of = ROLE_BY_SUFFIX.get
    for name, e in catalog.tensors.items():
        module, _, suffix = name.rpartition(".")  # split_tensor_name, inlined: ~92k names
        role = role_of(suffix)
        if role is not None and suffix not in FUSED_EXPERT_PARAMS:  # _resolve_split, inlined
            scheme = cache.get(module) or _cached_module_scheme(qconfig, module, semantics, cache)
            t = ResolvedTensor(name, module, role, scheme)
        else:
            t = _resolve_split(qconfig, name, module, suffix, e.dtype, e.shape, semantics, cache)
        tensors[name] = t
        by_module[t.module][suffix] = name
    rc = ResolvedCatalog(qconfig=qconfig, tensors=tensors)
    if isinstance(qconfig, QuarkConfig) and qconfig.export is None:
        msg = (
            "Quark quantization_config has no 'export' block; vLLM refuses such configs "
            "(add the export block the producer wrote)"
        )
        rc.issues.append(
            Issue(severity="error", file="config.json", rule="config_incomplete", message=msg)
        )
    if isinstance(qconfig, DeepSeekV4Config):
        _dsv4_float_linears(catalog, rc, by_module)
    modules = list(by_module.items())
    if len(modules) >= PARALLEL_CHECK_MIN_MODULES and can_fork():
        cut = int(len(modules) * CHILD_CHECK_SHARE)
        child = Forked(_module_issue_records, catalog, rc, modules[:cut], True)
        if child.started:  # the caller goes on (policy, engine) while the child checks

            def collect() -> list[Issue]:  # when the issues are read: check the rest here
                mine = _module_issues(catalog, rc, modules[cut:], packed=False)
                records = child.result()
                if records is None:
                    return _module_issues(catalog, rc, modules[:cut], packed=True) + mine
                theirs = [
                    Issue(severity=v, tensor=t, file=f, rule=r, message=m)
                    for v, t, f, r, m in records
                ]
                return theirs + mine

            rc._pending = collect
            return rc
    rc.issues.extend(_module_issues(catalog, rc, modules, packed=True))
    rc.issues.sort(key=_issue_order)
    return rc


#: catalogs with at least this many modules run most per-module checks in a forked child
#: (``checkpoint_tool.forked``) while the caller builds the policy, and the rest when the
#: issues are read: ~0.4 s of the ~0.8 s a full DeepSeek-R1 takes to resolve
PARALLEL_CHECK_MIN_MODULES = 8192
#: the child's share of the modules (it also checks packed shards)
CHILD_CHECK_SHARE = 0.7


def _issue_order(i: Issue) -> tuple:
    """Errors first, then by file, tensor, rule and message (a total order: the same issues
    sort the same whichever process found them)."""
    return (i.severity != "error", i.file or "", i.tensor or "", i.rule, i.message)


def _module_issues(
    catalog: Any, rc: ResolvedCatalog, modules: list[tuple[str, dict[str, str]]], packed: bool
) -> list[Issue]:
    """The findings of ``modules`` (dtypes, scales) and, if ``packed``, of packed shards."""
    scratch = ResolvedCatalog(qconfig=rc.qconfig, tensors=rc.tensors)
    expected = _ExpectedSiblings()
    for module, parts in modules:
        _check_module(catalog, scratch, module, parts, expected)
    if packed:
        _check_packed(catalog, scratch)
    return scratch.issues


def _module_issue_records(
    catalog: Any, rc: ResolvedCatalog, modules: list[tuple[str, dict[str, str]]], packed: bool
) -> list[tuple]:
    """``_module_issues`` as plain tuples, for the forked child to send back."""
    return [
        (i.severity, i.tensor, i.file, i.rule, i.message)
        for i in _module_issues(catalog, rc, modules, packed)
    ]


class _ExpectedSiblings:
    """``expected_siblings`` memoized per scheme object, weight dtype and shape.

    A catalog's ~46k modules hold a handful of distinct schemes (shared through the resolve
    cache) and shapes; keying on the scheme's identity skips rebuilding its storage key.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[int, str, tuple[int, ...]], tuple[Scheme, dict]] = {}

    def __call__(self, scheme: Scheme, dtype: str, shape: tuple[int, ...]) -> dict[str, Any]:
        key = (id(scheme), dtype, shape)
        hit = self._memo.get(key)
        if hit is None:  # the memo holds the scheme, so its id is not reused meanwhile
            hit = self._memo[key] = (scheme, expected_siblings(scheme, dtype, shape))
        return hit[1]


def _issue(catalog: Any, rule: str, name: str, message: str, severity: str = "error") -> Issue:
    entry = catalog.tensors.get(name)
    return Issue(
        severity=severity,  # type: ignore[arg-type]
        tensor=name,
        file=entry.file if entry else None,
        rule=rule,
        message=message,
    )


def _dsv4_float_linears(catalog: Any, rc: ResolvedCatalog, by_module: dict) -> None:
    """DeepSeek-V4 stores some linears in float with no ``.scale`` (the config cannot say)."""
    for parts in by_module.values():
        w = parts.get("weight")
        if w is None or rc.tensors[w].role != "weight" or not rc.tensors[w].scheme.quantized:
            continue
        has_scale = any(rc.tensors[n].role in SCALE_ROLES for n in parts.values())
        if catalog.tensors[w].dtype in FLOAT_DTYPES and not has_scale:
            rule = "deepseek_v4: float weight without .scale (module built unquantized)"
            scheme = unquantized(rc.qconfig.source, rule)
            for n in parts.values():
                rc.tensors[n] = rc.tensors[n]._replace(scheme=scheme)


def _why(scheme: Scheme) -> str:
    return f"{scheme.short()} by {scheme.rule}"


def _check_module(
    catalog: Any,
    rc: ResolvedCatalog,
    module: str,
    parts: dict[str, str],
    expected_for: _ExpectedSiblings,
) -> None:
    """Findings for one module: its weight's dtype, its expected scales, unexplained scales.

    ``parts``: suffix -> tensor name of every tensor of the module, in catalog order.
    """
    weight = None
    scales: list[tuple[str, str]] = []  # (suffix, name) of the scale-like tensors
    for suffix, name in parts.items():
        role = rc.tensors[name].role
        if role == "weight":
            weight = weight or name
        elif role in SCALE_ROLES:
            scales.append((suffix, name))
    if weight is None:
        for _, n in scales:
            msg = f"scale tensor with no {module}.weight next to it; the config does not explain it"
            rc.issues.append(_issue(catalog, "unexplained_tensor", n, msg))
        return
    entry = catalog.tensors[weight]
    scheme = rc.tensors[weight].scheme
    if scheme.format is WeightFormat.UNSUPPORTED:
        msg = f"{_why(scheme)}: ckpt cannot decode this scheme; it is reported but not converted"
        rc.issues.append(_issue(catalog, "unsupported_scheme", weight, msg, "warning"))
        return
    if scheme.weight_dtypes and entry.dtype not in scheme.weight_dtypes:
        msg = (
            f"stored as {entry.dtype}, but the config gives {_why(scheme)}, which stores "
            f"{'/'.join(scheme.weight_dtypes)}; the config and the weights disagree"
        )
        rc.issues.append(_issue(catalog, "weight_dtype", weight, msg))
        return
    if module.endswith(FUSED_EXPERT_SUFFIXES) and not scheme.quantized:
        msg = (
            f"fused 3-D expert tensor {list(entry.shape)} {entry.dtype}: "
            f"{scheme.rule}; vLLM expects per-expert tensors, split it when converting"
        )
        rc.issues.append(_issue(catalog, "fused_experts_unquantized", weight, msg, "warning"))
    expected = expected_for(scheme, entry.dtype, entry.shape)
    if scheme.scale_suffix in expected and not expected[scheme.scale_suffix].shapes:
        problem = weight_shape_problem(scheme, entry.dtype, tuple(entry.shape))
        msg = f"{entry.dtype} {list(entry.shape)}: {_why(scheme)} cannot store it ({problem})"
        rc.issues.append(_issue(catalog, "weight_shape", weight, msg))
        return
    for suffix, exp in expected.items():
        name = parts.get(suffix) or f"{module}.{suffix}"
        sib = catalog.tensors.get(name)
        if sib is None:
            msg = f"missing {exp.role} {name!r} ({'/'.join(exp.dtypes)}) that {_why(scheme)} needs"
            rc.issues.append(_issue(catalog, "missing_scale", weight, msg))
            continue
        if exp.dtypes and sib.dtype not in exp.dtypes:
            msg = f"{sib.dtype}, but {_why(scheme)} stores its {exp.role} as {'/'.join(exp.dtypes)}"
            rc.issues.append(_issue(catalog, "scale_dtype", name, msg))
        if tuple(sib.shape) not in exp.shapes:
            msg = (
                f"shape {list(sib.shape)}, but {_why(scheme)} needs {list(exp.shapes[0])} "
                f"for weight {list(entry.shape)} {entry.dtype}"
            )
            rc.issues.append(_issue(catalog, "scale_shape", name, msg))
    for suffix, name in scales:
        if suffix not in expected:
            wanted = ", ".join(expected) or "no scale tensors"
            msg = f"{_why(scheme)} stores {wanted}; this tensor is not explained by the config"
            rc.issues.append(_issue(catalog, "unexplained_tensor", name, msg))


def _check_packed(catalog: Any, rc: ResolvedCatalog) -> None:
    weights = rc.weights()
    seen: set[tuple[str, ...]] = set()
    # cheap first cut (~46k modules): a packed shard's last component, not a routed expert
    maybe = sorted(
        m for m in weights if m.rpartition(".")[2] in PACKED_SHARD_NAMES and expert_key(m) is None
    )
    for module in maybe:
        packed = packed_siblings(module)  # None for routed experts
        if packed is None:
            continue
        fused, shards = packed
        present = tuple(s for s in shards if s in weights)
        if len(present) < 2 or present in seen:
            continue
        seen.add(present)
        schemes = [weights[s].scheme for s in present]
        if len({storage_key(s) for s in schemes}) > 1:
            detail = "; ".join(
                f"{s.rsplit('.', 1)[-1]}: {sc.short()} ({sc.rule})"
                for s, sc in zip(present, schemes, strict=True)
            )
            msg = f"vLLM loads these shards into one {fused} layer and needs one scheme: {detail}"
            rc.issues.append(_issue(catalog, "packed_mismatch", weights[present[0]].name, msg))
