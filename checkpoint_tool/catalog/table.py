"""The catalog's tensors as columns: one row per tensor, in file order then header order.

A DeepSeek-R1 catalog has ~92k tensors, a per-expert MXFP4 MoE up to ~600k. Held as Python
objects a tensor costs a name string, a record, a shape tuple, a dict slot and several int
objects (~0.7 KiB); here a row is ~80 bytes:

- names: one string of every name joined by line breaks (``_text``; a name never holds one:
  the header reader refuses it), with ``_name_start`` (rows + 1 offsets) into it;
- ``_dtypes``: one byte per row, a code into ``DTYPE_NAMES``;
- shapes, ragged: ``_shape_off`` (rows + 1 offsets) into the flat ``_dims``;
- ``_file_of``: int32 index into ``files``; ``_begins``/``_ends``: int64 absolute offsets;
- the name lookup: each name's ``hash`` sorted (``_hashes``) with its row (``_hash_rows``),
  12 bytes a row instead of a dict entry and a string object.

The columns are numpy arrays, private: callers use the methods (``names``, ``row_of``,
``entry``, ``rows_of_file``, ``names_matching``, ``name_dtype_shape``, ``by_name``,
``total_bytes``, ``match_index``, ``shape_ids``, ``patterns``, ``names_of`` ...). Records
(``TensorEntry``) are made on demand, never held; ``TableTensors`` is the read-only
``Mapping[str, TensorEntry]`` view callers that want one record at a time use.

Example::

    table = TensorTable.from_headers(
        [("model-00001-of-00002.safetensors", header.columns)], where=root
    )
    table.entry(0)
    # TensorEntry(name='model.embed_tokens.weight', file='model-00001-of-00002.safetensors',
    #             dtype='BF16', shape=(129280, 7168), begin=2048, end=1853358080)
    table.rows_of_file("model-00001-of-00002.safetensors")   # range(0, 1201)
    tensors = TableTensors(table)   # a read-only Mapping[str, TensorEntry]
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from itertools import groupby
from operator import attrgetter
from typing import Any

import numpy as np

from checkpoint_tool.catalog.grouping import dense_ids
from checkpoint_tool.catalog.patterns import NAME_BLOCK, NamePatterns
from checkpoint_tool.catalog.safetensors_format import (
    DTYPE_CODES,
    DTYPE_NAMES,
    HeaderColumns,
    TensorEntry,
)
from checkpoint_tool.errors import InputError

_new = tuple.__new__
#: what joins the names in ``_text`` (and what no tensor name may hold)
SEP = "\n"


class TensorTable:
    """Tensors as columns (see the module docstring), built once from header columns."""

    def __init__(self, files: list[str], parts: Sequence[tuple[int, HeaderColumns]], where: object):
        """``parts``: ``(file number, columns)`` in row order (a file may come in several
        runs); ``where`` (the catalog's folder or label) names duplicates in the error."""
        self.files = files
        counts = [c.count for _, c in parts]
        self._n = n = sum(counts)
        self._text = SEP.join(c.text for _, c in parts if c.count)
        if n and self._text.count(SEP) != n - 1:  # headers refuse such names; records may not
            bad = next(e for _, c in parts for e in c.names if SEP in e)
            raise InputError(
                f"{where}: tensor {bad!r} has a line break in its name, which ckpt cannot "
                "catalog; rename the tensor"
            )
        lengths, hashes = [], []
        for _, cols in parts:  # one header's names as strings at a time
            names = cols.names
            lengths.append(np.fromiter(map(len, names), np.int64, cols.count))
            hashes.append(np.fromiter(map(hash, names), np.int64, cols.count))
        self._name_start = np.zeros(n + 1, np.int64)
        np.cumsum(_concat(lengths) + 1, out=self._name_start[1:])
        self._dtypes = np.frombuffer(b"".join(c.dtypes for _, c in parts), np.uint8).copy()
        ranks = np.frombuffer(b"".join(c.ranks for _, c in parts), np.uint8)
        self._shape_off = np.zeros(n + 1, np.int64)
        np.cumsum(ranks, out=self._shape_off[1:])
        self._dims = _concat([c.dims for _, c in parts])
        self._file_of = np.repeat(np.array([f for f, _ in parts], np.int32), counts)
        self._begins = _concat([c.begins for _, c in parts])
        self._ends = _concat([c.ends for _, c in parts])
        self._runs: dict[int, list[range]] = {}
        self._shape_ids: tuple[np.ndarray, list[tuple[int, ...]]] | None = None
        self._patterns: NamePatterns | None = None
        start = 0
        for (f, _), count in zip(parts, counts, strict=True):
            self._runs.setdefault(f, []).append(range(start, start + count))
            start += count
        self._index(_concat(hashes))
        self._check_duplicates(where)

    def _index(self, hashes: np.ndarray) -> None:
        """The name lookup from every row's name ``hash`` (``_hashes``/``_hash_rows``), and
        the plain-int views for one-row reads (indexing a memoryview gives an int, not a
        numpy scalar)."""
        order = np.argsort(hashes, kind="stable")
        self._hashes = hashes[order]
        self._hash_rows = order.astype(np.int32)
        self._hash_list = memoryview(self._hashes.data)
        self._starts = memoryview(self._name_start.data)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a Ray task's catalog) without the lookup: ``hash`` of a string differs
        from process to process, so the receiver rebuilds it (and the name patterns, when
        it asks for them)."""
        skip = ("_hashes", "_hash_rows", "_hash_list", "_starts", "_patterns")
        return {k: v for k, v in self.__dict__.items() if k not in skip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._patterns = None
        self._starts = memoryview(self._name_start.data)
        self._index(np.fromiter(map(hash, self.names()), np.int64, self._n))

    @classmethod
    def from_headers(
        cls, headers: Iterable[tuple[str, HeaderColumns]], *, where: object
    ) -> TensorTable:
        """The table of ``(file, columns)`` pairs in row order (a duplicate name across them is
        an ``InputError`` naming both files)."""
        files: list[str] = []
        number: dict[str, int] = {}
        parts = []
        for file, cols in headers:
            f = number.get(file)
            if f is None:
                f = number[file] = len(files)
                files.append(file)
            parts.append((f, cols))
        return cls(files, parts, where)

    @classmethod
    def from_entries(cls, entries: Iterable[TensorEntry]) -> TensorTable:
        """A table of ``entries`` (distinct names), rows in the order given."""
        groups = [(file, _columns(list(g))) for file, g in groupby(entries, key=attrgetter("file"))]
        return cls.from_headers(groups, where="")

    def _check_duplicates(self, where: object) -> None:
        """Equal names have equal hashes, adjacent in ``_hashes``: each run of equal hashes
        is checked name by name. The first row (in table order) that repeats an earlier
        name is reported, with the file of that earlier row."""
        h = self._hashes
        same = np.flatnonzero(h[1:] == h[:-1]) if len(h) > 1 else np.zeros(0, np.int64)
        worst: tuple[int, int] | None = None
        run_rows: dict[int, list[int]] = {}  # first index of a run of equal hashes -> rows
        first, prev = 0, -2
        for k in same.tolist():
            if k != prev + 1:
                first = k
                run_rows[first] = [int(self._hash_rows[k])]
            run_rows[first].append(int(self._hash_rows[k + 1]))
            prev = k
        for rows in run_rows.values():
            seen: dict[str, int] = {}
            for row in sorted(rows):
                earlier = seen.setdefault(self.name(row), row)
                if earlier != row and (worst is None or row < worst[1]):
                    worst = (earlier, row)
        if worst is not None:
            a, b = worst
            raise InputError(
                f"{where}/{self.files[self._file_of[b]]}: tensor {self.name(b)!r} also appears in "
                f"{self.files[self._file_of[a]]}; duplicate tensors across shards: remove the "
                "stale shard"
            )

    def __len__(self) -> int:
        return self._n

    # -- names --------------------------------------------------------------------------

    def name(self, row: int) -> str:
        """The name of ``row``."""
        start = self._starts
        return self._text[start[row] : start[row + 1] - 1]

    def names(self) -> list[str]:
        """Every name in row order (made now: one split of the joined names)."""
        return self._text.split(SEP) if self._n else []

    def joined_names(self) -> str:
        """Every name in row order, joined by ``SEP`` (the table's own string, not a copy)."""
        return self._text

    def iter_names(self) -> Iterator[str]:
        """Every name in row order, made ``NAME_BLOCK`` rows at a time (no list of all)."""
        text, starts, n = self._text, self._starts, self._n
        for a in range(0, n, NAME_BLOCK):
            b = min(a + NAME_BLOCK, n)
            yield from text[starts[a] : starts[b] - 1].split(SEP)

    def names_of(self, rows: np.ndarray) -> list[str]:
        """The names of ``rows`` (an int array), in its order, made as one block."""
        return self.patterns().names_of(rows)

    def patterns(self) -> NamePatterns:
        """The names grouped by pattern (``catalog.patterns``), computed once."""
        if self._patterns is None:
            self._patterns = NamePatterns(self._text, self._name_start)
        return self._patterns

    def row_of(self, name: str) -> int | None:
        """The row of the tensor called ``name``, or None."""
        h = hash(name)
        hashes = self._hash_list
        k = bisect_left(hashes, h)
        while k < self._n and hashes[k] == h:
            row = int(self._hash_rows[k])
            if self.name(row) == name:
                return row
            k += 1
        return None

    def rows_of(self, names: Iterable[str]) -> list[int | None]:
        """``row_of`` of each of ``names`` (vectorized: one sorted search for all)."""
        names = list(names)
        if not names or not self._n:
            return [None] * len(names)
        want = np.fromiter(map(hash, names), np.int64, len(names))
        k = np.searchsorted(self._hashes, want)
        k[k == self._n] = self._n - 1
        rows = self._hash_rows[k].tolist()
        hit = (self._hashes[k] == want).tolist()
        name = self.name
        out: list[int | None] = []
        for wanted, row, h in zip(names, rows, hit, strict=True):
            out.append(row if h and name(row) == wanted else self.row_of(wanted) if h else None)
        return out

    def by_name(self) -> np.ndarray:
        """The rows in name order (``sorted`` of the names), as an int64 array.

        Sorted as one array of fixed-width strings (``np.argsort``: code point order, as
        ``str`` compares), built from the names' characters a block of rows at a time;
        ``sorted`` of the names when that array would be large (a few very long names) or
        a name holds a NUL (fixed-width strings ignore trailing NULs)."""
        n = self._n
        width = int((np.diff(self._name_start) - 1).max()) if n else 0
        if not width or width * n > 2 * len(self._text) + (1 << 20) or "\0" in self._text:
            names = self.names()
            return np.array(sorted(range(n), key=names.__getitem__), np.int64)
        chars = self.patterns().chars
        padded = np.zeros((n, width), chars.dtype)
        place = np.arange(width)
        for a in range(0, n, NAME_BLOCK):
            start = self._name_start[a : a + NAME_BLOCK + 1]
            inside = place < (np.diff(start) - 1)[:, None]
            padded[a : a + len(start) - 1][inside] = chars[(start[:-1, None] + place)[inside]]
        kind = "S" if chars.dtype == np.uint8 else "U"
        keys = padded.view(f"{kind}{width}").ravel()
        return np.argsort(keys, kind="stable").astype(np.int64)

    # -- one row ------------------------------------------------------------------------

    def entry(self, row: int) -> TensorEntry:
        """The record of ``row`` (made now, not kept)."""
        a, b = int(self._shape_off[row]), int(self._shape_off[row + 1])
        return _new(
            TensorEntry,
            (
                self.name(row),
                self.files[self._file_of[row]],
                DTYPE_NAMES[self._dtypes[row]],
                tuple(self._dims[a:b].tolist()),
                int(self._begins[row]),
                int(self._ends[row]),
            ),
        )

    def entries(self, rows: Iterable[int] | None = None) -> Iterator[TensorEntry]:
        """Records of ``rows`` (default: all, in order), made one at a time."""
        if rows is None:
            rows = range(self._n)
        rows = np.fromiter(rows, np.int64) if not isinstance(rows, np.ndarray) else rows
        names = self.names() if len(rows) > self._n // 8 else None
        files, dtype_names = self.files, DTYPE_NAMES
        file_of = self._file_of[rows].tolist()
        dtypes = self._dtypes[rows].tolist()
        begins, ends = self._begins[rows].tolist(), self._ends[rows].tolist()
        shape = self.shape_reader()
        for k, r in enumerate(rows.tolist()):
            yield _new(
                TensorEntry,
                (
                    names[r] if names is not None else self.name(r),
                    files[file_of[k]],
                    dtype_names[dtypes[k]],
                    shape(r),
                    begins[k],
                    ends[k],
                ),
            )

    def entries_by_name(self) -> Iterator[TensorEntry]:
        """Records of every row in name order, made one at a time."""
        return self.entries(self.by_name())

    def dtype_shape(self, name: str) -> tuple[str, tuple[int, ...]]:
        """``(dtype, shape)`` of the tensor called ``name``, without a whole record
        (``KeyError`` when there is none)."""
        return self.dtype_shape_of(self._row(name))

    def dtype_shape_of(self, row: int) -> tuple[str, tuple[int, ...]]:
        """``(dtype, shape)`` of ``row``."""
        a, b = int(self._shape_off[row]), int(self._shape_off[row + 1])
        return DTYPE_NAMES[self._dtypes[row]], tuple(self._dims[a:b].tolist())

    def nbytes(self, name: str) -> int:
        """Bytes of the tensor called ``name`` (``KeyError`` when there is none)."""
        row = self._row(name)
        return int(self._ends[row] - self._begins[row])

    def _row(self, name: str) -> int:
        row = self.row_of(name)
        if row is None:
            raise KeyError(name)
        return row

    # -- bulk ---------------------------------------------------------------------------

    def shape_reader(self) -> Any:
        """``row -> shape tuple``, sharing one tuple per distinct shape."""
        dims, off = self._dims.tolist(), self._shape_off.tolist()
        seen: dict[tuple[int, ...], tuple[int, ...]] = {}

        def shape(r: int) -> tuple[int, ...]:
            s = tuple(dims[off[r] : off[r + 1]])
            return seen.setdefault(s, s)

        return shape

    def shapes(self) -> Iterator[tuple[int, ...]]:
        """Every row's shape, in order (equal shapes share one tuple)."""
        return map(self.shape_reader(), range(self._n))

    def ranks(self) -> np.ndarray:
        """Every row's number of dims (int64)."""
        return np.diff(self._shape_off)

    def dtype_codes(self) -> np.ndarray:
        """Every row's dtype as its code into ``DTYPE_NAMES`` (uint8; a copy)."""
        return self._dtypes.copy()

    def shape_ids(self) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        """Every row's shape as a number (int64), and the distinct shapes those numbers
        index: ``(array([0, 1, 1]), [(8, 64), (64,)])``. Computed once (the same arrays for
        every caller: read them, do not write them)."""
        if self._shape_ids is None:
            ranks = self.ranks()
            columns = [ranks]
            for d in range(int(ranks.max()) if self._n else 0):  # dim d + 1 (0: no such dim)
                has = np.flatnonzero(ranks > d)
                column = np.zeros(self._n, np.int64)
                column[has] = self._dims[self._shape_off[has] + d] + 1
                columns.append(column)
            ids = dense_ids(*columns)
            first = np.unique(ids, return_index=True)[1]
            self._shape_ids = ids, [self.dtype_shape_of(int(r))[1] for r in first.tolist()]
        return self._shape_ids

    def dtype_names(self) -> list[str]:
        """Every row's dtype name, in order."""
        return [DTYPE_NAMES[c] for c in self._dtypes.tolist()]

    def name_dtype_shape(self) -> Iterator[tuple[str, str, tuple[int, ...]]]:
        """``(name, dtype, shape)`` of every row, in order (no records made)."""
        return zip(self.names(), self.dtype_names(), self.shapes(), strict=True)

    def nbytes_column(self) -> np.ndarray:
        """Bytes of every row (int64)."""
        return self._ends - self._begins

    def file_column(self) -> np.ndarray:
        """Every row's file number into ``files`` (int32; a copy)."""
        return self._file_of.copy()

    def rows_of_file(self, file: str) -> Sequence[int]:
        """The rows of one shard in order (one ``range`` for an opened checkpoint, whose
        shards are added one by one); empty for a file without any."""
        try:
            runs = self._runs.get(self.files.index(file), [range(0)])
        except ValueError:
            return range(0)
        return runs[0] if len(runs) == 1 else [r for run in runs for r in run]

    def names_matching(self, pattern: re.Pattern[str]) -> list[str]:
        """Names ``pattern.search`` accepts, in row order."""
        return list(filter(pattern.search, self.names()))

    def match_index(
        self, names: Sequence[str], file_ids: Sequence[int], files: Sequence[str]
    ) -> tuple[int, str | None] | None:
        """Hold an index's listing (``names[k]`` indexed in ``files[file_ids[k]]``) against
        the rows: the first ``(k, stored file or None)`` where they disagree, else None."""
        rows = self.rows_of(names)
        if None not in rows:
            where = {f: i for i, f in enumerate(self.files)}
            # the index's file numbers in the table's numbering (-1: a file without tensors)
            renumber = np.array([where.get(f, -1) for f in files], np.int32)
            listed = renumber[np.asarray(file_ids, np.int64)]
            if np.array_equal(self._file_of[np.array(rows, np.int64)], listed):
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
        return int(self._ends.sum() - self._begins.sum())


class TableTensors(Mapping[str, TensorEntry]):
    """A read-only ``Mapping[str, TensorEntry]`` over a ``TensorTable``, in row order: what
    ``Catalog.tensors`` is for an opened checkpoint. ``.table`` gives the bulk methods."""

    __slots__ = ("table",)

    def __init__(self, table: TensorTable) -> None:
        self.table = table

    def __getitem__(self, name: str) -> TensorEntry:
        row = self.table.row_of(name)
        if row is None:
            raise KeyError(name)
        return self.table.entry(row)

    def get(self, name: str, default: Any = None) -> Any:
        row = self.table.row_of(name)
        return default if row is None else self.table.entry(row)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.table.row_of(name) is not None

    def __iter__(self) -> Iterator[str]:
        return self.table.iter_names()

    def __reversed__(self) -> Iterator[str]:
        return reversed(self.table.names())

    def __len__(self) -> int:
        return len(self.table)

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
        return table.entries(range(len(table) - 1, -1, -1))


class _ItemsView(ItemsView[str, TensorEntry]):
    """``items()``: ``(name, record)`` straight from the columns."""

    _mapping: TableTensors

    def __iter__(self) -> Iterator[tuple[str, TensorEntry]]:
        for e in self._mapping.table.entries():
            yield e[0], e

    def __reversed__(self) -> Iterator[tuple[str, TensorEntry]]:
        table = self._mapping.table
        for e in table.entries(range(len(table) - 1, -1, -1)):
            yield e[0], e


def _concat(arrays: list[Any]) -> np.ndarray:
    """One int64 array of the int64 buffers ``arrays`` (``array('q')`` or numpy)."""
    if not arrays:
        return np.zeros(0, np.int64)
    return np.concatenate([np.frombuffer(a, np.int64) for a in arrays])


def _columns(group: list[TensorEntry]) -> HeaderColumns:
    from array import array

    dims = array("q")
    for e in group:
        dims.extend(e.shape)
    return HeaderColumns(
        SEP.join(e.name for e in group),
        len(group),
        bytes(DTYPE_CODES[e.dtype] for e in group),
        bytes(len(e.shape) for e in group),
        dims,
        array("q", [e.begin for e in group]),
        array("q", [e.end for e in group]),
    )
