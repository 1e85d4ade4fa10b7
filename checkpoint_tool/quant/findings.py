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

import numpy as np

from checkpoint_tool.catalog.grouping import dense_ids, distinct, groups
from checkpoint_tool.formats import format_of
from checkpoint_tool.quant.configs import QuarkConfig
from checkpoint_tool.quant.configs.names import (
    PACKED_SHARD_NAMES,
    expert_parts,
    packed_siblings,
    tensor_name,
)
from checkpoint_tool.quant.configs.shapes import (
    Expected,
    expected_siblings,
    weight_shape_problem,
)
from checkpoint_tool.quant.resolve import FUSED_EXPERT_SUFFIXES, ResolvedCatalog
from checkpoint_tool.quant.resolved import ROLE_CODES, ROLES
from checkpoint_tool.quant.roles import SCALE_ROLES
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.report import Issue, Severity

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog

#: one finding as plain data (it may come back from a forked child through ``marshal``):
#: ``(severity, tensor, file, rule, message)``
Record = tuple[Severity, str | None, str | None, str, str]

#: ``spread(fn, items) == [fn(x) for x in items]``, perhaps computed partly elsewhere
Spread = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]


def catalog_findings(
    catalog: Catalog,
    rc: ResolvedCatalog,
    *,
    spread: Spread | None = None,
    fused_native: bool = False,
) -> list[Issue]:
    """Every finding of ``rc`` against ``catalog``'s headers (the rows of ``rc``'s table:
    ``catalog`` is the one ``rc`` was resolved from): errors first, then by file, tensor,
    rule and message.

    Modules are checked by class (``ResolvedColumns.module_classes``): the first module of a
    class in full, and the others only when that one had findings or looked outside its own
    tensors (then each may differ). ``spread`` maps the check over those others (default:
    here, in order); its results must be the check's own (plain tuples), in order.
    ``fused_native``: the model's vLLM loader reads fused 3-D expert tensors as they are
    (``model.families.loads_fused_experts``), so an unquantized one is no finding.
    """
    records: list[Record] = list(_config_records(rc))
    check = _ModuleCheck(rc)
    others: list[int] = []
    for members in check.classes():
        found, own = check.findings(members[0])
        records.extend(found)
        if found or not own:
            others.extend(members[1:])
    if others:
        per_module = spread(check, others) if spread is not None else list(map(check, others))
        for found in per_module:
            records.extend(found)
    records.extend(check.packed_records())
    issues = [
        Issue(severity=v, tensor=t, file=f, rule=r, message=m)
        for v, t, f, r, m in records
        if not (fused_native and r == "fused_experts_unquantized")
    ]
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
    """The findings of one module: ``check(module number) -> (Record, ...)``.

    A module's own findings depend on its name only through the messages, and on its tensors
    through their suffixes, roles, schemes, dtypes and shapes: its class (plus whether it is
    a fused 3-D expert parameter). When the first module of a class came out clean with
    every expected sibling among its own tensors, every module of the class is clean: the
    256 experts of one layer and projection are checked in full once. ``expected_siblings``
    is memoized per scheme (``Scheme.siblings_key``), weight dtype and shape.
    """

    def __init__(self, rc: ResolvedCatalog) -> None:
        self.columns = cols = rc.columns
        self.table = cols.table
        self.memo: dict[tuple[tuple, str, tuple[int, ...]], dict[str, Expected]] = {}
        #: per module number, the row of its weight (-1: none), as ``rc.weights()`` has it
        self.weight_row = np.full(len(cols.module_names), -1, np.int64)
        weights = np.flatnonzero(cols.role == ROLE_CODES["weight"])
        self.weight_row[cols.module[weights]] = weights

    def classes(self) -> list[np.ndarray]:
        """The module numbers of each class, in module order; the classes in the order of
        their first module."""
        cols = self.columns
        ids = dense_ids(cols.module_classes(), cols.modules_ending(FUSED_EXPERT_SUFFIXES))
        order, start = groups(ids, int(ids.max()) + 1 if len(ids) else 0)
        members = [order[a:b] for a, b in zip(start[:-1].tolist(), start[1:].tolist(), strict=True)]
        return sorted(members, key=lambda m: int(m[0]))

    def expected(self, scheme: Scheme, dtype: str, shape: tuple[int, ...]) -> dict[str, Expected]:
        key = (scheme.siblings_key, dtype, shape)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = expected_siblings(scheme, dtype, shape)
        return hit

    def record(self, rule: str, row: int, message: str, severity: Severity = "error") -> Record:
        """A finding about the tensor of ``row``."""
        entry = self.table.entry(row)
        return (severity, entry.name, entry.file, rule, message)

    def __call__(self, module: int) -> tuple[Record, ...]:
        return self.findings(module)[0]

    def findings(self, module_id: int) -> tuple[tuple[Record, ...], bool]:
        """The module's findings, and whether every sibling its scheme expects was among its
        own tensors (only then do they follow from its class)."""
        cols, table, record = self.columns, self.table, self.record
        module = cols.module_names[module_id]
        #: suffix -> row of every tensor of the module, in row order
        parts = {cols.suffixes[cols.suffix[r]]: r for r in cols.module_rows(module_id).tolist()}
        weight = None
        scales: list[tuple[str, int]] = []  # (suffix, row) of the scale-like tensors
        for suffix, row in parts.items():
            role = ROLES[cols.role[row]]
            if role == "weight":
                weight = row if weight is None else weight
            elif role in SCALE_ROLES:
                scales.append((suffix, row))
        if weight is None:
            msg = f"scale tensor with no {module}.weight next to it; the config does not explain it"
            return tuple(record("unexplained_tensor", r, msg) for _, r in scales), True
        entry = table.entry(weight)
        scheme = cols.schemes[cols.scheme[weight]]
        if not format_of(scheme).decodable:
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
            own = own and suffix in parts
            row = parts[suffix] if suffix in parts else table.row_of(tensor_name(module, suffix))
            if row is None:
                name = tensor_name(module, suffix)
                msg = f"missing {exp.role} {name!r} ({'/'.join(exp.dtypes)}) that {_why(scheme)} needs"
                out.append(record("missing_scale", weight, msg))
                continue
            sib = table.entry(row)
            if exp.dtypes and sib.dtype not in exp.dtypes:
                msg = f"{sib.dtype}, but {_why(scheme)} stores its {exp.role} as {'/'.join(exp.dtypes)}"
                out.append(record("scale_dtype", row, msg))
            if tuple(sib.shape) not in exp.shapes:
                msg = (
                    f"shape {list(sib.shape)}, but {_why(scheme)} needs {list(exp.shapes[0])} "
                    f"for weight {list(entry.shape)} {entry.dtype}"
                )
                out.append(record("scale_shape", row, msg))
        for suffix, row in scales:
            if suffix not in expected:
                wanted = ", ".join(expected) or "no scale tensors"
                msg = f"{_why(scheme)} stores {wanted}; this tensor is not explained by the config"
                out.append(record("unexplained_tensor", row, msg))
        return tuple(out), own

    def packed_records(self) -> list[Record]:
        """The ``packed_mismatch`` of each packed layer whose shards' schemes differ, found
        at its first stored shard. The candidates are the modules of the weights whose name
        pattern (``catalog.patterns``) may be a packed shard's and no routed expert's: a few
        per layer, not its experts."""
        patterns = self.table.patterns()
        weights = np.flatnonzero(self.weight_row >= 0)
        rows = self.weight_row[weights]
        out: list[Record] = []
        for k in distinct(patterns.pattern[rows]).tolist():
            picked = rows[patterns.pattern[rows] == k]
            module = self.columns.module_names[self.columns.module[picked[0]]]
            if not _may_be_packed_shard(patterns.patterns[k][: len(module)]):
                continue
            for row in picked.tolist():
                found = self.packed(self.columns.module_names[self.columns.module[row]])
                if found is not None:
                    out.append(found)
        return out

    def packed(self, module: str) -> Record | None:
        """If ``module`` is the first stored shard of a packed layer (q/k/v, gate/up) whose
        shards' schemes differ: vLLM loads them into one layer and deep-compares their
        configs (``producer_identity``: spec included)."""
        packed = packed_siblings(module)  # None for routed experts
        if packed is None:
            return None
        fused, shards = packed
        weights = {s: w for s in shards if (w := self._weight(s)) is not None}
        present = list(weights)
        if len(present) < 2 or present[0] != module:
            return None
        cols = self.columns
        schemes = [cols.schemes[cols.scheme[weights[s]]] for s in present]
        if len({s.producer_identity() for s in schemes}) == 1:
            return None
        detail = "; ".join(
            f"{s.rsplit('.', 1)[-1]}: {sc.short()} ({sc.rule})"
            for s, sc in zip(present, schemes, strict=True)
        )
        msg = f"vLLM loads these shards into one {fused} layer and needs one scheme: {detail}"
        return self.record("packed_mismatch", weights[module], msg)

    def _weight(self, module: str) -> int | None:
        """The row of the weight of ``module`` (a packed shard: ``{module}.weight``), or None."""
        row = self.table.row_of(f"{module}.weight")
        return row if row is not None and self.weight_row[self.columns.module[row]] == row else None


#: the last name component of every packed shard, as a name pattern writes it (``w1`` -> ``w0``)
_SHARD_PATTERNS = frozenset(
    s.translate(str.maketrans("0123456789", "0" * 10)) for s in PACKED_SHARD_NAMES
)


def _may_be_packed_shard(module_pattern: str) -> bool:
    """Whether modules of this name pattern may be packed shards: their last component
    may be a shard's, and they are no routed experts (``expert_parts`` does not read digit
    values, so a pattern answers for its names)."""
    return (
        module_pattern.rpartition(".")[2] in _SHARD_PATTERNS
        and expert_parts(module_pattern) is None
    )
