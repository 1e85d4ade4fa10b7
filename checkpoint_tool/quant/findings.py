"""What the headers say against the quantization config: the findings of a resolved catalog.

Per module: the weight's dtype and shape, the scale tensors its scheme needs (present, dtype,
shape), scale-like tensors nothing explains; per packed layer (q/k/v, gate/up): one scheme for
all shards; per config: what vLLM refuses outright. A pure step over the catalog's headers and
its ``ResolvedCatalog``: ``spread`` (e.g. ``forked.spread_map``) may run part of the per-module
checks elsewhere, the answer is the same.

Example::

    rc = resolve_catalog(cat)
    catalog_findings(cat, rc)
    # [Issue(severity='error', tensor='model.layers.3.mlp.experts.0.down_proj.weight',
    #        rule='missing_scale', message="missing scale '...weight_scale_inv' (F32) that ...")]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from checkpoint_tool.quant.configs import QuarkConfig
from checkpoint_tool.quant.configs.names import PACKED_SHARD_NAMES, packed_siblings
from checkpoint_tool.quant.configs.shapes import (
    Expected,
    expected_siblings,
    weight_shape_problem,
)
from checkpoint_tool.quant.resolve import FUSED_EXPERT_SUFFIXES, ResolvedCatalog
from checkpoint_tool.quant.roles import SCALE_ROLES
from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.report import Issue, Severity

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog

#: one finding as plain data (it may come back from a forked child through ``marshal``):
#: ``(severity, tensor, file, rule, message)``
Record = tuple[Severity, str | None, str | None, str, str]

#: ``spread(fn, items) == [fn(x) for x in items]``, perhaps computed partly elsewhere
Spread = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]


def catalog_findings(
    catalog: Catalog, rc: ResolvedCatalog, *, spread: Spread | None = None
) -> list[Issue]:
    """Every finding of ``rc`` against ``catalog``'s headers: errors first, then by file,
    tensor, rule and message.

    ``spread`` maps the per-module check over the modules (default: here, in order); its
    results must be the check's own (plain tuples), in order.
    """
    records: list[Record] = list(_config_records(rc))
    check = _ModuleCheck(catalog, rc)
    modules = list(rc.modules.items())
    per_module = spread(check, modules) if spread is not None else [check(m) for m in modules]
    for found in per_module:
        records.extend(found)
    issues = [Issue(severity=v, tensor=t, file=f, rule=r, message=m) for v, t, f, r, m in records]
    issues.sort(key=_issue_order)
    return issues


def _issue_order(i: Issue) -> tuple:
    """Errors first, then by file, tensor, rule and message (a total order: the same issues
    sort the same whichever process found them)."""
    return (i.severity != "error", i.file or "", i.tensor or "", i.rule, i.message)


def _config_records(rc: ResolvedCatalog) -> list[Record]:
    """What vLLM refuses in the config itself."""
    if isinstance(rc.qconfig, QuarkConfig) and rc.qconfig.export is None:
        msg = (
            "Quark quantization_config has no 'export' block; vLLM refuses such configs "
            "(add the export block the producer wrote)"
        )
        return [("error", None, "config.json", "config_incomplete", msg)]
    return []


def _why(scheme: Scheme) -> str:
    return f"{scheme.short()} by {scheme.rule}"


class _ModuleCheck:
    """The findings of one module: ``check((module, parts)) -> (Record, ...)``; a module that
    is the first stored shard of a packed layer also answers for the layer.

    ``parts``: suffix -> tensor name of every tensor of the module, in catalog order.
    ``expected_siblings`` is memoized per scheme (``Scheme.siblings_key``), weight dtype and
    shape: a catalog's ~46k modules hold a handful of distinct schemes.

    A module's own findings depend on its name only through the messages, and on its tensors
    through their suffixes, roles, schemes, dtypes and shapes: its *signature*. A signature
    that came out clean once (every expected sibling among the module's own tensors) is clean
    again, so the 256 experts of one layer and projection are checked in full once, e.g.
    ``(False, (("weight", "weight", 7, "F8_E4M3", (2048, 7168)), ("weight_scale_inv",
    "scale", 7, "F32", (16, 56))))`` (7: the id of the layer's one ``Scheme`` object, which
    the resolved catalog keeps alive).
    """

    def __init__(self, catalog: Catalog, rc: ResolvedCatalog) -> None:
        self.headers = catalog.tensors
        self.dtype_shape = catalog.table.dtype_shape
        self.tensors = rc.tensors
        self.weights = rc.weights()
        self.memo: dict[tuple[tuple, str, tuple[int, ...]], dict[str, Expected]] = {}
        self.clean: set[tuple] = set()

    def expected(self, scheme: Scheme, dtype: str, shape: tuple[int, ...]) -> dict[str, Expected]:
        key = (scheme.siblings_key, dtype, shape)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = expected_siblings(scheme, dtype, shape)
        return hit

    def record(self, rule: str, name: str, message: str, severity: Severity = "error") -> Record:
        entry = self.headers.get(name)
        return (severity, name, entry.file if entry else None, rule, message)

    def __call__(self, item: tuple[str, dict[str, str]]) -> tuple[Record, ...]:
        found = self.module(*item)
        # cheap first cut (~46k modules): a packed shard's last component
        if item[0].rpartition(".")[2] in PACKED_SHARD_NAMES and item[0] in self.weights:
            packed = self.packed(item[0])
            if packed is not None:
                return (*found, packed)
        return found

    def module(self, module: str, parts: dict[str, str]) -> tuple[Record, ...]:
        """Findings of the module's own tensors: weight dtype and shape, scales (none when
        its signature came out clean before)."""
        tensors, dtype_shape = self.tensors, self.dtype_shape
        signature = (
            module.endswith(FUSED_EXPERT_SUFFIXES),
            tuple(
                (suffix, (t := tensors[name]).role, id(t.scheme), *dtype_shape(name))
                for suffix, name in parts.items()
            ),
        )
        if signature in self.clean:
            return ()
        found, own = self._findings(module, parts)
        if not found and own:
            self.clean.add(signature)
        return found

    def _findings(self, module: str, parts: dict[str, str]) -> tuple[tuple[Record, ...], bool]:
        """``module``'s findings, and whether every sibling its scheme expects was among its
        own tensors (only then do they follow from its signature)."""
        tensors, headers, record = self.tensors, self.headers, self.record
        weight = None
        scales: list[tuple[str, str]] = []  # (suffix, name) of the scale-like tensors
        for suffix, name in parts.items():
            role = tensors[name].role
            if role == "weight":
                weight = weight or name
            elif role in SCALE_ROLES:
                scales.append((suffix, name))
        if weight is None:
            msg = f"scale tensor with no {module}.weight next to it; the config does not explain it"
            return tuple(record("unexplained_tensor", n, msg) for _, n in scales), True
        entry = headers[weight]
        scheme = tensors[weight].scheme
        if scheme.format is WeightFormat.UNSUPPORTED:
            msg = (
                f"{_why(scheme)}: ckpt cannot decode this scheme; it is reported but not converted"
            )
            return (record("unsupported_scheme", weight, msg, "warning"),), True
        if scheme.weight_dtypes and entry.dtype not in scheme.weight_dtypes:
            msg = (
                f"stored as {entry.dtype}, but the config gives {_why(scheme)}, which stores "
                f"{'/'.join(scheme.weight_dtypes)}; the config and the weights disagree"
            )
            return (record("weight_dtype", weight, msg),), True
        out: list[Record] = []
        if module.endswith(FUSED_EXPERT_SUFFIXES) and not scheme.quantized:
            msg = (
                f"fused 3-D expert tensor {list(entry.shape)} {entry.dtype}: "
                f"{scheme.rule}; vLLM expects per-expert tensors, split it when converting"
            )
            out.append(record("fused_experts_unquantized", weight, msg, "warning"))
        expected = self.expected(scheme, entry.dtype, entry.shape)
        if scheme.scale_suffix in expected and not expected[scheme.scale_suffix].shapes:
            problem = weight_shape_problem(scheme, entry.dtype, tuple(entry.shape))
            msg = f"{entry.dtype} {list(entry.shape)}: {_why(scheme)} cannot store it ({problem})"
            return (*out, record("weight_shape", weight, msg)), True
        own = True
        for suffix, exp in expected.items():
            name = parts.get(suffix) or f"{module}.{suffix}"
            own = own and suffix in parts
            sib = headers.get(name)
            if sib is None:
                msg = f"missing {exp.role} {name!r} ({'/'.join(exp.dtypes)}) that {_why(scheme)} needs"
                out.append(record("missing_scale", weight, msg))
                continue
            if exp.dtypes and sib.dtype not in exp.dtypes:
                msg = f"{sib.dtype}, but {_why(scheme)} stores its {exp.role} as {'/'.join(exp.dtypes)}"
                out.append(record("scale_dtype", name, msg))
            if tuple(sib.shape) not in exp.shapes:
                msg = (
                    f"shape {list(sib.shape)}, but {_why(scheme)} needs {list(exp.shapes[0])} "
                    f"for weight {list(entry.shape)} {entry.dtype}"
                )
                out.append(record("scale_shape", name, msg))
        for suffix, name in scales:
            if suffix not in expected:
                wanted = ", ".join(expected) or "no scale tensors"
                msg = f"{_why(scheme)} stores {wanted}; this tensor is not explained by the config"
                out.append(record("unexplained_tensor", name, msg))
        return tuple(out), own

    def packed(self, module: str) -> Record | None:
        """If ``module`` is the first stored shard of a packed layer (q/k/v, gate/up) whose
        shards' schemes differ: vLLM loads them into one layer and deep-compares their
        configs (``producer_identity``: spec included)."""
        packed = packed_siblings(module)  # None for routed experts
        if packed is None:
            return None
        fused, shards = packed
        present = [s for s in shards if s in self.weights]
        if len(present) < 2 or present[0] != module:
            return None
        schemes = [self.weights[s].scheme for s in present]
        if len({s.producer_identity() for s in schemes}) == 1:
            return None
        detail = "; ".join(
            f"{s.rsplit('.', 1)[-1]}: {sc.short()} ({sc.rule})"
            for s, sc in zip(present, schemes, strict=True)
        )
        msg = f"vLLM loads these shards into one {fused} layer and needs one scheme: {detail}"
        return self.record("packed_mismatch", self.weights[module].name, msg)
