"""Grouping rows of integer columns, at numpy speed: distinct combinations and row groups.

A full-size checkpoint has ~10^5 tensors but a few dozen distinct (suffix, role, scheme,
dtype, shape) combinations, and a MoE layer's 256 experts of one projection are alike:
``dense_ids`` numbers the distinct combinations of several columns, ``groups`` lists the
rows of each number, ``first_rows`` the first of them, ``distinct`` the values an array
holds. No per-row Python object is made.

Example::

    dense_ids(np.array([7, 3, 7, 3]), np.array([1, 0, 1, 2]))   # array([1, 0, 1, 2])
    order, start = groups(np.array([1, 0, 1, 2]), 3)
    order[start[1] : start[2]]                                 # array([0, 2]): the rows of 1
"""

from __future__ import annotations

import numpy as np

#: a folded key stays below this, so that ``key * span + column`` cannot overflow int64
_KEY_LIMIT = 1 << 62


def dense_ids(*columns: np.ndarray) -> np.ndarray:
    """Per row, the number of its combination of ``columns`` values (ints, all of one
    length, each column's range below 2**62): equal combinations get equal numbers,
    ``0 .. distinct - 1`` in the order of the combinations (the first column most
    significant)."""
    n = len(columns[0]) if columns else 0
    key = np.zeros(n, np.int64)
    if not n:
        return key
    for column in columns:
        low = int(column.min())
        span = int(column.max()) - low + 1
        if int(key.max()) >= _KEY_LIMIT // span:  # fold what we have into dense numbers first
            key = np.unique(key, return_inverse=True)[1].reshape(-1)
        key = key * span + (column.astype(np.int64) - low if low else column)
    return np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of an array of small non-negative ints, ascending: ``np.unique``
    without its first-call import of ``numpy.ma`` (~40 ms)."""
    return np.flatnonzero(np.bincount(values)) if len(values) else np.zeros(0, np.int64)


def first_rows(ids: np.ndarray, count: int) -> np.ndarray:
    """The first row holding each number ``0 .. count - 1`` of ``ids`` (each held once at
    least)."""
    order, start = groups(ids, count)
    return order[start[:-1]]


def groups(ids: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of each number ``0 .. count - 1`` of ``ids``: ``order[start[k]:start[k + 1]]``
    are the rows whose id is ``k``, in row order (``start`` has ``count + 1`` offsets)."""
    order = np.argsort(ids, kind="stable")
    start = np.zeros(count + 1, np.int64)
    np.cumsum(np.bincount(ids, minlength=count), out=start[1:])
    return order, start
