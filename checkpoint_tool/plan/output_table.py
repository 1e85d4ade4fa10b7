"""The planned output tensors as columns that reference the catalog's rows.

Each output row is one tensor made from one source tensor (a catalog row): its ``form``
(the dtype, shape, pieces' slices and pads, combine, axis and ops: everything but the names,
shared by every expert of a layer and projection), its layer, what happened to its name
(``KINDS``), whether it is an expert tensor, and its bytes. Only a name a rule changed is
held; the rest is the source's name, read from the catalog when needed. Records
(``OutputTensor``) are made on demand; ``OutputRows`` is a file's tensors as a read-only
``Sequence[OutputTensor]``.

A full-size R1 plan is ~92k rows and a few hundred forms: ~30 bytes a row.

Example::

    table = OutputTable(catalog.table)
    form = table.form_id(Form("F8_E4M3", (7168, 2048), ((), ()), ops=("copy",), copy=True))
    table.add(source_row, form, layer=3, kind=KIND["kept"], expert=True, nbytes=14680064)
    table.record(0)
    # OutputTensor(name='model.layers.3.mlp.experts.0.down_proj.weight', dtype='F8_E4M3',
    #              shape=[7168, 2048], pieces=(Piece(source='model.layers.3...weight'),), ...)
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from checkpoint_tool.catalog.patterns import NAME_BLOCK
from checkpoint_tool.plan.model import OutputTensor
from checkpoint_tool.regions import Pad, Piece, Region

if TYPE_CHECKING:
    from checkpoint_tool.catalog.table import TensorTable

#: what the planner did to an output's name, by code (the ``kind`` column)
KINDS: tuple[str, ...] = ("kept", "renamed", "redirected", "unfused")
KIND: dict[str, int] = {k: code for code, k in enumerate(KINDS)}

#: one piece without its source: ``(slices, pads)``
PieceForm = tuple[tuple[Region, ...], tuple[Pad, ...]]


@dataclass(frozen=True)
class Form:
    """How an output tensor is made from its source, the source left out: hashable, shared.

    ``Form("U8", (7168, 64), (((Region(1, 0, 64),), (Pad(1, 16, "00"),)),), ops=(...))``.
    ``copy``: the source's bytes as they are; ``padded``: a pad adds elements.
    """

    dtype: str
    shape: tuple[int, ...]
    pieces: tuple[PieceForm, ...]
    combine: str = "single"
    axis: int = 0
    ops: tuple[str, ...] = ()
    copy: bool = False
    padded: bool = False


@dataclass(eq=False)
class OutputTable:
    """The columns (see the module docstring), appended to row by row or in bulk."""

    sources: TensorTable
    forms: list[Form] = field(default_factory=list)
    _form_ids: dict[Form, int] = field(default_factory=dict, repr=False)
    #: per row: output name, or None when it is the source's name
    names: list[str | None] = field(default_factory=list)
    _source: list[np.ndarray] = field(default_factory=list, repr=False)
    _form: list[np.ndarray] = field(default_factory=list, repr=False)
    _layer: list[np.ndarray] = field(default_factory=list, repr=False)
    _kind: list[np.ndarray] = field(default_factory=list, repr=False)
    _expert: list[np.ndarray] = field(default_factory=list, repr=False)
    _nbytes: list[np.ndarray] = field(default_factory=list, repr=False)
    _cols: tuple[np.ndarray, ...] | None = field(default=None, repr=False)

    def form_id(self, form: Form) -> int:
        """The number of ``form`` (added on first sight)."""
        k = self._form_ids.get(form)
        if k is None:
            k = self._form_ids[form] = len(self.forms)
            self.forms.append(form)
        return k

    def extend(
        self,
        source: np.ndarray,
        form: np.ndarray,
        layer: np.ndarray,
        kind: np.ndarray,
        expert: np.ndarray,
        nbytes: np.ndarray,
        names: Sequence[str | None],
    ) -> None:
        """Append rows, one per element of the (equal-length) columns."""
        self._cols = None
        self._source.append(np.asarray(source, np.int32))
        self._form.append(np.asarray(form, np.int32))
        self._layer.append(np.asarray(layer, np.int32))
        self._kind.append(np.asarray(kind, np.uint8))
        self._expert.append(np.asarray(expert, bool))
        self._nbytes.append(np.asarray(nbytes, np.int64))
        self.names.extend(names)

    def add(
        self, source: int, form: int, *, layer: int | None, kind: int, expert: bool, nbytes: int,
        name: str | None = None,
    ) -> None:  # fmt: skip
        """Append one row."""
        self.extend(
            np.array([source]), np.array([form]), np.array([-1 if layer is None else layer]),
            np.array([kind]), np.array([expert]), np.array([nbytes]), [name],
        )  # fmt: skip

    def reorder(self, order: np.ndarray) -> None:
        """Keep the rows in ``order`` (an index array): rows are renumbered."""
        source, form, layer, kind, expert, nbytes = self.columns()
        names = self.names
        self.names = [names[k] for k in order.tolist()]
        self._source, self._form, self._layer = [source[order]], [form[order]], [layer[order]]
        self._kind, self._expert, self._nbytes = [kind[order]], [expert[order]], [nbytes[order]]
        self._cols = None

    def columns(self) -> tuple[np.ndarray, ...]:
        """``(source, form, layer, kind, expert, nbytes)``, each one array over all rows."""
        if self._cols is None:
            parts = (self._source, self._form, self._layer, self._kind, self._expert, self._nbytes)
            dtypes = (np.int32, np.int32, np.int32, np.uint8, bool, np.int64)
            self._cols = tuple(
                np.concatenate(p) if p else np.zeros(0, d) for p, d in zip(parts, dtypes, strict=True)
            )
            self._source, self._form, self._layer, self._kind, self._expert, self._nbytes = (
                [c] for c in self._cols
            )
        return self._cols

    def __len__(self) -> int:
        return len(self.names)

    # -- one row ------------------------------------------------------------------------

    def name(self, row: int) -> str:
        """The output name of ``row``."""
        own = self.names[row]
        return own if own is not None else self.sources.name(int(self.columns()[0][row]))

    def output_names(self) -> list[str]:
        """Every row's output name, in row order."""
        return [name for block in self.name_blocks() for name in block]

    def name_blocks(self, size: int = NAME_BLOCK) -> Iterator[list[str]]:
        """Every row's output name, in row order, ``size`` rows at a time (a pass over the
        names without ~10^5 strings alive at once)."""
        source = self.columns()[0]
        names_of = self.sources.names_of
        for a in range(0, len(self.names), size):
            own = self.names[a : a + size]
            yield [
                o if o is not None else s
                for o, s in zip(own, names_of(source[a : a + size]), strict=True)
            ]

    def record(self, row: int, source_name: str | None = None, name: str | None = None) -> OutputTensor:
        """The ``OutputTensor`` of ``row`` (made now, not kept)."""
        source, form, layer, _, _, _ = self.columns()
        src = source_name if source_name is not None else self.sources.name(int(source[row]))
        f = self.forms[form[row]]
        lay = int(layer[row])
        return OutputTensor(
            name if name is not None else self.names[row] or src,
            f.dtype,
            list(f.shape),
            tuple(Piece.of(src, slices, pads) for slices, pads in f.pieces),
            f.combine,  # type: ignore[arg-type]
            f.axis,
            f.ops,
            None if lay < 0 else lay,
        )

    def rows(self, rows: np.ndarray | Sequence[int]) -> OutputRows:
        """Rows ``rows`` (in that order) as a read-only sequence of records."""
        return OutputRows(self, np.asarray(rows, np.int64))


class OutputRows(Sequence[OutputTensor]):
    """A file's tensors: rows of an ``OutputTable`` as ``OutputTensor`` records made on demand.

    Compares equal to any sequence of the same records (a plan read back from JSON holds
    lists)."""

    __slots__ = ("rows", "table")

    def __init__(self, table: OutputTable, rows: np.ndarray) -> None:
        self.table = table
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, k: int) -> OutputTensor: ...
    @overload
    def __getitem__(self, k: slice) -> list[OutputTensor]: ...
    def __getitem__(self, k: int | slice) -> OutputTensor | list[OutputTensor]:
        if isinstance(k, slice):
            return [self.table.record(int(r)) for r in self.rows[k]]
        return self.table.record(int(self.rows[k]))

    def __iter__(self) -> Iterator[OutputTensor]:
        record = self.table.record
        for r in self.rows.tolist():
            yield record(r)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OutputRows({len(self)} tensors)"


class Provenance(Mapping[str, list[str]]):
    """source name -> its output names, read off the rows of an ``OutputTable`` in plan
    order (sources in name order, a source's outputs in placement order): a plan's
    ``provenance`` without a dict of ~10^5 lists.

    ``{"model.layers.3.mlp.shared_experts.down_proj.weight":
    ["model.layers.3.mlp.experts.256.down_proj.weight"], ...}``
    """

    __slots__ = ("_run_of", "_runs", "outputs")

    def __init__(self, outputs: OutputTable) -> None:
        self.outputs = outputs
        source = outputs.columns()[0]
        starts = np.flatnonzero(np.diff(source)) + 1 if len(source) else np.zeros(0, np.int64)
        #: each run of rows of one source: its first row, and one past its last
        self._runs = np.concatenate([[0], starts, [len(source)]]).astype(np.int64)
        self._run_of: dict[int, int] | None = None

    def _sources(self) -> np.ndarray:
        return self.outputs.columns()[0][self._runs[:-1]]

    def __len__(self) -> int:
        return len(self._runs) - 1 if len(self.outputs) else 0

    def __iter__(self) -> Iterator[str]:
        names = self.outputs.sources.names()
        return (names[s] for s in self._sources().tolist())

    def __getitem__(self, name: str) -> list[str]:
        row = self.outputs.sources.row_of(name)
        if self._run_of is None:
            self._run_of = {s: k for k, s in enumerate(self._sources().tolist())}
        k = self._run_of.get(row) if row is not None else None
        if k is None:
            raise KeyError(name)
        return [self.outputs.name(r) for r in range(self._runs[k], self._runs[k + 1])]

    def __contains__(self, name: object) -> bool:
        try:
            self[name]  # type: ignore[index]
        except (KeyError, TypeError):
            return False
        return True

    def items(self) -> Any:
        return _ProvenanceItems(self)


class _ProvenanceItems(ItemsView[str, list[str]]):
    _mapping: Provenance

    def __iter__(self) -> Iterator[tuple[str, list[str]]]:
        prov = self._mapping
        table = prov.outputs
        runs = prov._runs.tolist()
        done = 0  # rows before ``outs``
        outs: list[str] = []
        blocks = table.name_blocks(NAME_BLOCK)
        sources = prov._sources()
        for first in range(0, len(sources), NAME_BLOCK):
            names = table.sources.names_of(sources[first : first + NAME_BLOCK])
            for k, name in enumerate(names, first):
                a, b = runs[k], runs[k + 1]
                while done + len(outs) < b:
                    done += len(outs)
                    outs = next(blocks)
                if a >= done:
                    yield name, outs[a - done : b - done]
                else:  # a source's outputs across two blocks
                    yield name, [table.name(r) for r in range(a, b)]
