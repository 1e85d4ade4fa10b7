"""The catalog's tensors as columns: one row per tensor, in file order then header order.

A DeepSeek-R1 catalog has ~92k tensors. Held as ``TensorEntry`` tuples each costs a tuple, a
shape tuple and four or more int objects (~0.4 KiB with its dict slot); here a row is a few
bytes in flat arrays, and ``TensorEntry`` records are made on demand, never held. The
columns (private: callers use the methods, e.g. ``rows_of_file``, ``names_matching``,
``name_dtype_shape``, ``entries_by_name``, ``total_bytes``, ``match_index``):

- ``_names``: the names (str) by row, and ``_rows`` name -> row (the lookup dict shares the
  str objects; a bytes blob of names would save ~100 B per tensor but every full pass by
  name, which most callers make, would decode it again);
- ``_dtypes``: one byte per row, a code into ``DTYPE_NAMES``;
- shapes, ragged: ``_shape_off`` (rows + 1 offsets) into the flat ``_dims``;
- ``_file_of``: int32 index into ``files``; ``_begins``/``_ends``: int64 absolute offsets.

The columns are stdlib ``array``/``bytes`` (no numpy import for header-only commands);
``numpy.frombuffer`` can view them without a copy should a caller want vector maths.

Example::

    table = TensorTable()
    table.add_file("model-00001-of-00002.safetensors", header.columns, where=root)
    table.entry(0)
    # TensorEntry(name='model.embed_tokens.weight', file='model-00001-of-00002.safetensors',
    #             dtype='BF16', shape=(129280, 7168), begin=2048, end=1853358080)
    table.rows_of_file("model-00001-of-00002.safetensors")   # range(0, 1201)
    tensors = TableTensors(table)   # a read-only Mapping[str, TensorEntry]
"""

from __future__ import annotations

import re
from array import array
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from itertools import accumulate, groupby, islice, pairwise
from operator import attrgetter
from typing import Any

from checkpoint_tool.catalog.safetensors_format import (
    DTYPE_CODES,
    DTYPE_NAMES,
    HeaderColumns,
    TensorEntry,
)
from checkpoint_tool.errors import InputError

_new = tuple.__new__


class TensorTable:
    """Tensors as columns (see the module docstring); rows are appended file by file."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self._names: list[str] = []
        self._rows: dict[str, int] = {}
        self._dtypes = bytearray()
        self._shape_off = array("q", [0])
        self._dims = array("q")
        self._file_of = array("i")
        self._begins = array("q")
        self._ends = array("q")
        self._file_runs: dict[str, list[range]] = {}

    def __len__(self) -> int:
        return len(self._names)

    def add_file(self, file: str, cols: HeaderColumns, *, where: object) -> None:
        """Append one shard's header columns (or another run of rows of a file already
        added); a name already present is an ``InputError`` (``where`` is the catalog's
        folder or label, for the message)."""
        rows = self._rows
        if not rows.keys().isdisjoint(cols.names):
            name = next(name for name in cols.names if name in rows)
            raise InputError(
                f"{where}/{file}: tensor {name!r} also appears in "
                f"{self.files[self._file_of[rows[name]]]}; "
                "duplicate tensors across shards: remove the stale shard"
            )
        start, n = len(self._names), len(cols.names)
        runs = self._file_runs.get(file)
        if runs is None:
            runs = self._file_runs[file] = []
            self.files.append(file)
        runs.append(range(start, start + n))
        self._names.extend(cols.names)
        rows.update(zip(cols.names, range(start, start + n), strict=True))
        self._dtypes += cols.dtypes
        self._shape_off.extend(islice(accumulate(cols.ranks, initial=self._shape_off[-1]), 1, None))
        self._dims.extend(cols.dims)
        self._file_of.extend(array("i", [self.files.index(file)]) * n)
        self._begins.extend(cols.begins)
        self._ends.extend(cols.ends)

    @classmethod
    def from_entries(cls, entries: Iterable[TensorEntry]) -> TensorTable:
        """A table of ``entries`` (distinct names), rows in the order given."""
        table = cls()
        for file, group in groupby(entries, key=attrgetter("file")):
            table.add_file(file, _columns(list(group)), where="")
        return table

    # -- one row ------------------------------------------------------------------------

    def entry(self, row: int) -> TensorEntry:
        """The record of ``row`` (made now, not kept)."""
        a, b = self._shape_off[row], self._shape_off[row + 1]
        return _new(
            TensorEntry,
            (
                self._names[row],
                self.files[self._file_of[row]],
                DTYPE_NAMES[self._dtypes[row]],
                tuple(self._dims[a:b]),
                self._begins[row],
                self._ends[row],
            ),
        )

    def entries(self, rows: Iterable[int] | None = None) -> Iterator[TensorEntry]:
        """Records of ``rows`` (default: all, in order), made one at a time."""
        names, files, file_of, dtypes = self._names, self.files, self._file_of, self._dtypes
        off, dims, begins, ends = self._shape_off, self._dims, self._begins, self._ends
        for r in range(len(names)) if rows is None else rows:
            yield _new(
                TensorEntry,
                (
                    names[r],
                    files[file_of[r]],
                    DTYPE_NAMES[dtypes[r]],
                    tuple(dims[off[r] : off[r + 1]]),
                    begins[r],
                    ends[r],
                ),
            )

    def entries_by_name(self) -> Iterator[TensorEntry]:
        """Records of every row in name order (``sorted`` of the names), made one at a time:
        a pass over all tensors by name without a name lookup per tensor."""
        return self.entries(map(self._rows.__getitem__, sorted(self._names)))

    def dtype_shape(self, name: str) -> tuple[str, tuple[int, ...]]:
        """``(dtype, shape)`` of the tensor called ``name``, without a whole record."""
        row = self._rows[name]
        return DTYPE_NAMES[self._dtypes[row]], tuple(
            self._dims[self._shape_off[row] : self._shape_off[row + 1]]
        )

    def nbytes(self, name: str) -> int:
        """Bytes of the tensor called ``name`` (``KeyError`` when there is none)."""
        row = self._rows[name]
        return self._ends[row] - self._begins[row]

    # -- bulk ---------------------------------------------------------------------------

    def shapes(self) -> Iterator[tuple[int, ...]]:
        """Every row's shape, in order."""
        dims = self._dims
        return (tuple(dims[a:b]) for a, b in pairwise(self._shape_off))

    def name_dtype_shape(self) -> Iterator[tuple[str, str, tuple[int, ...]]]:
        """``(name, dtype, shape)`` of every row, in order (no records made)."""
        return zip(
            self._names, map(DTYPE_NAMES.__getitem__, self._dtypes), self.shapes(), strict=True
        )

    def rows_of_file(self, file: str) -> Sequence[int]:
        """The rows of one shard in order (one ``range`` for an opened checkpoint, whose
        shards are added one by one); empty for a file without any."""
        runs = self._file_runs.get(file, [range(0)])
        return runs[0] if len(runs) == 1 else [r for run in runs for r in run]

    def names_matching(self, pattern: re.Pattern[str]) -> list[str]:
        """Names ``pattern.search`` accepts, in row order."""
        return list(filter(pattern.search, self._names))

    def match_index(
        self, names: Sequence[str], file_ids: Sequence[int], files: Sequence[str]
    ) -> tuple[int, str | None] | None:
        """Hold an index's listing (``names[k]`` indexed in ``files[file_ids[k]]``) against
        the rows: the first ``(k, stored file or None)`` where they disagree, else None."""
        get = self._rows.get
        rows = list(map(get, names))
        if None not in rows:
            where = {f: i for i, f in enumerate(self.files)}
            # the index's file numbers in the table's numbering (-1: a file without tensors)
            renumber = [where.get(f, -1) for f in files]
            listed = array("i", map(renumber.__getitem__, file_ids))
            if array("i", map(self._file_of.__getitem__, rows)) == listed:  # type: ignore[arg-type]
                return None
        for k, (row, fid) in enumerate(zip(rows, file_ids, strict=True)):
            if row is None:
                return k, None
            stored = self.files[self._file_of[row]]
            if stored != files[fid]:
                return k, stored
        raise AssertionError("unreachable: a mismatch was found above")

    def total_bytes(self) -> int:
        """Bytes of tensor data over all rows."""
        return sum(self._ends) - sum(self._begins)


class TableTensors(Mapping[str, TensorEntry]):
    """A read-only ``Mapping[str, TensorEntry]`` over a ``TensorTable``, in row order: what
    ``Catalog.tensors`` is for an opened checkpoint. ``.table`` gives the bulk methods."""

    __slots__ = ("table",)

    def __init__(self, table: TensorTable) -> None:
        self.table = table

    def __getitem__(self, name: str) -> TensorEntry:
        table = self.table
        return table.entry(table._rows[name])

    def get(self, name: str, default: Any = None) -> Any:
        row = self.table._rows.get(name)
        return default if row is None else self.table.entry(row)

    def __contains__(self, name: object) -> bool:
        return name in self.table._rows

    def __iter__(self) -> Iterator[str]:
        return iter(self.table._names)

    def __reversed__(self) -> Iterator[str]:
        return reversed(self.table._names)

    def __len__(self) -> int:
        return len(self.table._names)

    def keys(self) -> Any:
        return self.table._rows.keys()

    def values(self) -> Any:
        return _ValuesView(self)

    def items(self) -> Any:
        return _ItemsView(self)

    def __repr__(self) -> str:
        return f"TableTensors({len(self)} tensors in {len(self.table.files)} files)"


class _ValuesView(ValuesView[TensorEntry]):
    """``values()``: records straight from the columns (no lookup per name)."""

    _mapping: TableTensors

    def __iter__(self) -> Iterator[TensorEntry]:
        return self._mapping.table.entries()

    def __reversed__(self) -> Iterator[TensorEntry]:
        table = self._mapping.table
        return table.entries(reversed(range(len(table))))


class _ItemsView(ItemsView[str, TensorEntry]):
    """``items()``: ``(name, record)`` straight from the columns."""

    _mapping: TableTensors

    def __iter__(self) -> Iterator[tuple[str, TensorEntry]]:
        for e in self._mapping.table.entries():
            yield e[0], e

    def __reversed__(self) -> Iterator[tuple[str, TensorEntry]]:
        table = self._mapping.table
        for e in table.entries(reversed(range(len(table)))):
            yield e[0], e


def _columns(group: list[TensorEntry]) -> HeaderColumns:
    dims = array("q")
    for e in group:
        dims.extend(e.shape)
    return HeaderColumns(
        [e.name for e in group],
        bytes(DTYPE_CODES[e.dtype] for e in group),
        bytes(len(e.shape) for e in group),
        dims,
        array("q", [e.begin for e in group]),
        array("q", [e.end for e in group]),
    )
