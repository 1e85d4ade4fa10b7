"""Tensor names grouped by pattern: a name with each ASCII digit written ``0``.

``model.layers.3.mlp.experts.17.down_proj.weight`` has the pattern
``model.layers.0.mlp.experts.00.down_proj.weight``. A full-size DeepSeek-R1 has ~92k names
but ~95 patterns. The names of one pattern have the same length and the same characters
everywhere but at its digits, so what a regex or a string method finds in a pattern (as long
as it does not read digit values: ``matching``) sits at the same place in each of its names:
work per name becomes work per pattern, and the digits at a place are read for all its names
at once (``numbers``, ``split_by``) from the names as one array of characters.

Example::

    p = NamePatterns.of_names(["l.3.w", "l.17.w", "l.4.w", "emb"])
    p.patterns                         # ['l.0.w', 'l.00.w', 'emb']
    rows = p.rows(0)                   # array([0, 2])
    p.numbers(rows, 2, 3)              # array([3, 4])
    [p.text(r, 0, 3) for r in rows]    # ['l.3', 'l.4']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import numpy as np

from checkpoint_tool.catalog.grouping import dense_ids, groups

#: bytes.translate table: every ASCII digit to ``0``
_ZERO_DIGITS = bytes(48 if 48 <= b <= 57 else b for b in range(256))
#: int64 holds every number of up to 18 digits
_MAX_DIGITS = 18


class NamePatterns:
    """The names of a table (joined by ``\\n``, with each name's start) by pattern."""

    def __init__(self, text: str, starts: np.ndarray) -> None:
        """``text``: the names joined by line breaks; ``starts``: the offset of each name in
        it, and one past the end (``len(text) + 1``) last."""
        self.starts = starts
        if text.isascii():
            raw = text.encode("ascii")
            self.chars: np.ndarray = np.frombuffer(raw, np.uint8)
            lines: list = raw.translate(_ZERO_DIGITS).split(b"\n") if len(starts) > 1 else []
            del raw
        else:  # one array item per character, so that offsets are those of ``text``
            self.chars = np.frombuffer(text.encode("utf-32-le"), np.uint32)
            zeroed = np.where((self.chars >= 48) & (self.chars <= 57), 48, self.chars)
            lines = zeroed.astype(np.uint32).tobytes().decode("utf-32-le").split("\n")
            lines = lines if len(starts) > 1 else []
        number = {line: k for k, line in enumerate(dict.fromkeys(lines))}
        self.pattern = np.fromiter(map(number.__getitem__, lines), np.int32, len(lines))
        del lines
        self.patterns: list[str] = [
            p.decode("ascii") if isinstance(p, bytes) else p for p in number
        ]
        self._order, self._start = groups(self.pattern, len(self.patterns))

    @classmethod
    def of_names(cls, names: Iterable[str]) -> NamePatterns:
        """The patterns of ``names`` (none holding a line break)."""
        names = list(names)
        lengths = np.fromiter(map(len, names), np.int64, len(names))
        starts = np.zeros(len(names) + 1, np.int64)
        np.cumsum(lengths + 1, out=starts[1:])
        return cls("\n".join(names), starts)

    def rows(self, k: int) -> np.ndarray:
        """The rows of pattern number ``k``, in row order."""
        return self._order[self._start[k] : self._start[k + 1]]

    def text(self, row: int, start: int, end: int) -> str:
        """Characters ``[start, end)`` of the name of ``row``."""
        at = int(self.starts[row])
        chars = self.chars[at + start : at + end]
        return chars.tobytes().decode("ascii" if chars.dtype == np.uint8 else "utf-32-le")

    def numbers(self, rows: np.ndarray, start: int, end: int) -> np.ndarray:
        """The number written at ``[start, end)`` of each of ``rows``' names (``int`` of that
        text): int64 read as one array when they are ASCII digits, else Python ints in an
        object array (a number too long for int64, digits of another script)."""
        width = end - start
        if width <= _MAX_DIGITS:
            chars = self.chars[self.starts[rows, None] + np.arange(start, end)]
            if ((chars >= 48) & (chars <= 57)).all():
                powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
                return (chars.astype(np.int64) - 48) @ powers
        return np.array([int(self.text(r, start, end)) for r in rows.tolist()], object)

    def matching(self, regex: re.Pattern[str]) -> Iterator[tuple[int, re.Match[str]]]:
        """``(pattern number, match)`` of each pattern ``regex.match`` accepts. A regex that
        treats all ASCII digits alike (no digit among its literals or classes, ``\\d``
        allowed) matches a pattern exactly where it matches each of its names, over the
        same characters."""
        for k, pattern in enumerate(self.patterns):
            m = regex.match(pattern)
            if m is not None:
                yield k, m

    def split_by(self, k: int, rows: np.ndarray, start: int, end: int) -> Iterator[np.ndarray]:
        """``rows`` (of pattern ``k``) grouped by their names' characters ``[start, end)``:
        each group's rows in row order, the groups in the order of their first row."""
        places = [i for i in range(start, end) if self.patterns[k][i] == "0"]
        if not places or not len(rows):
            if len(rows):
                yield rows
            return
        chars = self.chars[self.starts[rows, None] + np.array(places)]
        ids = dense_ids(*chars.T.astype(np.int64))
        order, bounds = groups(ids, int(ids.max()) + 1)
        parts = [
            rows[order[a:b]] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
        ]
        yield from sorted(parts, key=lambda part: int(part[0]))
