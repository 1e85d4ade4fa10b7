"""A resolved catalog as columns: each tensor's role, scheme and module, by table row.

``quant.resolve.resolve_catalog`` fills them; callers read them through the views
(``ResolvedTensors``: name -> ``ResolvedTensor``; ``ModuleParts``: module -> suffix -> name),
or in bulk through the column methods where a whole pass over ~10^5 tensors matters.

Per row (the catalog table's rows): ``role`` (uint8 code into ``ROLES``), ``scheme`` (int32
index into ``schemes``: one object per distinct scheme, shared by every tensor that has it),
``module`` (int32 index into ``module_names``) and ``suffix`` (int32 index into
``suffixes``). Per module: the number of its name pattern (``module_pattern`` into
``module_patterns``, ``catalog.patterns``), so that what a module's name says without its
digits is read once per pattern. A full-size R1 resolves to ~3 KB of distinct schemes, 46k
module names and 13 bytes a tensor.

Example::

    cols = resolve_catalog(cat).columns
    cols.record(cols.table.row_of("model.layers.3.mlp.experts.0.down_proj.weight"))
    # ResolvedTensor(name='model.layers.3.mlp.experts.0.down_proj.weight',
    #                module='model.layers.3.mlp.experts.0.down_proj', role='weight',
    #                scheme=Scheme(format='fp8_block', ...))
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from checkpoint_tool.catalog.grouping import dense_ids, distinct, groups
from checkpoint_tool.quant.roles import Role
from checkpoint_tool.quant.scheme import Scheme

if TYPE_CHECKING:
    from checkpoint_tool.catalog.table import TensorTable

#: the roles by code (the ``role`` column); ``ROLE_CODES[role]`` is the code
ROLES: tuple[Role, ...] = (
    "weight",
    "scale",
    "global_scale",
    "input_scale",
    "bias",
    "other",
    "zero_point",
)
ROLE_CODES: dict[str, int] = {role: code for code, role in enumerate(ROLES)}


class ResolvedTensor(NamedTuple):
    """One tensor's module, role and the scheme of its module (with the rule that matched).

    Made on demand from the columns (``ResolvedColumns.record``), never held for every tensor.
    """

    name: str
    module: str
    role: Role
    scheme: Scheme


@dataclass(eq=False)
class ResolvedColumns:
    """The columns (see the module docstring), row for row with ``table``."""

    table: TensorTable
    role: np.ndarray
    scheme: np.ndarray
    module: np.ndarray
    suffix: np.ndarray
    schemes: list[Scheme]
    module_names: Sequence[str]
    suffixes: Sequence[str]
    #: per module number, the number of its name pattern in ``module_patterns``
    #: (``catalog.patterns``: ``model.layers.00.mlp.experts.000.down_proj``)
    module_pattern: np.ndarray
    module_patterns: list[str]
    #: module name -> number, built on the first lookup by name
    _module_ids: dict[str, int] | None = field(default=None, repr=False)
    #: rows grouped by module (CSR: ``_by_module`` rows, ``_module_start`` offsets)
    _by_module: np.ndarray | None = field(default=None, repr=False)
    _module_start: np.ndarray | None = field(default=None, repr=False)

    def record(self, row: int) -> ResolvedTensor:
        """The ``ResolvedTensor`` of ``row`` (made now)."""
        return ResolvedTensor(
            self.table.name(row),
            self.module_names[self.module[row]],
            ROLES[self.role[row]],
            self.schemes[self.scheme[row]],
        )

    def records(self) -> Iterator[ResolvedTensor]:
        """Every row's record, in row order."""
        modules, schemes = self.module_names, self.schemes
        for name, m, r, s in zip(
            self.table.names(),
            self.module.tolist(),
            self.role.tolist(),
            self.scheme.tolist(),
            strict=True,
        ):
            yield ResolvedTensor(name, modules[m], ROLES[r], schemes[s])

    def module_id(self, module: str) -> int | None:
        """The number of ``module`` (None: no tensor of the catalog belongs to it)."""
        if self._module_ids is None:
            self._module_ids = {m: k for k, m in enumerate(self.module_names)}
        return self._module_ids.get(module)

    def module_rows(self, module_id: int) -> np.ndarray:
        """The rows of module number ``module_id``, in row order."""
        order, start = self._grouped()
        return order[start[module_id] : start[module_id + 1]]

    def _grouped(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows grouped by module (``grouping.groups``), computed once."""
        if self._by_module is None or self._module_start is None:
            self._by_module, self._module_start = groups(self.module, len(self.module_names))
        return self._by_module, self._module_start

    def modules_ending(self, suffixes: tuple[str, ...]) -> np.ndarray:
        """Per module number, whether its name ends with one of ``suffixes`` (texts without
        digits, e.g. ``.experts.down_proj``), read off its name pattern."""
        ends = np.array([p.endswith(suffixes) for p in self.module_patterns], bool)
        return ends[self.module_pattern]

    def module_classes(self) -> np.ndarray:
        """Per module number, the number of its class: the modules of one class hold
        tensors of the same suffixes, roles, schemes, dtypes and shapes, row for row, so
        that all a check of a module can find out without its name is the same for each
        (a layer's 256 experts of one projection are one class). ``array([0, 1, 0])``:
        modules 0 and 2 are alike."""
        table = self.table
        shape_id, _ = table.shape_ids()
        tensor_kind = dense_ids(self.suffix, self.role, self.scheme, table.dtype_codes(), shape_id)
        order, start = self._grouped()
        sizes = np.diff(start)
        out = np.zeros(len(self.module_names), np.int64)
        taken = 0
        for size in distinct(sizes).tolist():  # the modules of ``size`` tensors, together
            modules = np.flatnonzero(sizes == size)
            kinds = tensor_kind[order[start[modules, None] + np.arange(size)]]
            ids = dense_ids(*kinds.T)
            out[modules] = ids + taken
            taken += int(ids.max()) + 1
        return out

    def weight_rows(self) -> np.ndarray:
        """Per module number, the row of its ``weight`` tensor (-1: it has none); gpt-oss's
        ``X.experts.gate_up_proj_blocks`` and compressed-tensors' ``X.weight_packed`` are their
        module's weight too."""
        out = np.full(len(self.module_names), -1, np.int64)
        for suffix in ("weight_packed", "weight", "blocks"):
            if suffix in self.suffixes:
                rows = np.flatnonzero(self.suffix == self.suffixes.index(suffix))
                rows = rows[self.role[rows] == ROLE_CODES["weight"]]
                out[self.module[rows]] = rows
        return out

    def rows_by_module(self) -> Iterator[tuple[str, np.ndarray]]:
        """``(module, its rows)`` for every module, in the order modules first appear."""
        for k, module in enumerate(self.module_names):
            yield module, self.module_rows(k)

    def parts(self, module_id: int) -> dict[str, str]:
        """Suffix -> tensor name of every tensor of module ``module_id``, in row order."""
        suffixes, name = self.suffixes, self.table.name
        return {suffixes[self.suffix[r]]: name(r) for r in self.module_rows(module_id).tolist()}


class ResolvedTensors(Mapping[str, ResolvedTensor]):
    """Read-only name -> ``ResolvedTensor``, in catalog order (records made on demand)."""

    __slots__ = ("columns",)

    def __init__(self, columns: ResolvedColumns) -> None:
        self.columns = columns

    def __getitem__(self, name: str) -> ResolvedTensor:
        row = self.columns.table.row_of(name)
        if row is None:
            raise KeyError(name)
        return self.columns.record(row)

    def get(self, name: str, default: Any = None) -> Any:
        row = self.columns.table.row_of(name)
        return default if row is None else self.columns.record(row)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.columns.table.row_of(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns.table.names())

    def __len__(self) -> int:
        return len(self.columns.table)

    def values(self) -> Any:
        return _Records(self)

    def items(self) -> Any:
        return _Items(self)


class _Records(ValuesView[ResolvedTensor]):
    _mapping: ResolvedTensors

    def __iter__(self) -> Iterator[ResolvedTensor]:
        return self._mapping.columns.records()


class _Items(ItemsView[str, ResolvedTensor]):
    _mapping: ResolvedTensors

    def __iter__(self) -> Iterator[tuple[str, ResolvedTensor]]:
        for t in self._mapping.columns.records():
            yield t.name, t


class ModuleParts(Mapping[str, dict[str, str]]):
    """Read-only module -> suffix -> tensor name, modules in the order they first appear."""

    __slots__ = ("columns",)

    def __init__(self, columns: ResolvedColumns) -> None:
        self.columns = columns

    def __getitem__(self, module: str) -> dict[str, str]:
        k = self.columns.module_id(module)
        if k is None:
            raise KeyError(module)
        return self.columns.parts(k)

    def get(self, module: str, default: Any = None) -> Any:
        k = self.columns.module_id(module)
        return default if k is None else self.columns.parts(k)

    def __contains__(self, module: object) -> bool:
        return isinstance(module, str) and self.columns.module_id(module) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns.module_names)

    def __len__(self) -> int:
        return len(self.columns.module_names)

    def items(self) -> Any:
        return _ModuleItems(self)


class _ModuleItems(ItemsView[str, dict[str, str]]):
    _mapping: ModuleParts

    def __iter__(self) -> Iterator[tuple[str, dict[str, str]]]:
        cols = self._mapping.columns
        names, suffixes = cols.table.names(), cols.suffixes
        parts: list[dict[str, str]] = [{} for _ in cols.module_names]
        for row, (m, x) in enumerate(zip(cols.module.tolist(), cols.suffix.tolist(), strict=True)):
            parts[m][suffixes[x]] = names[row]
        return zip(cols.module_names, parts, strict=True)
