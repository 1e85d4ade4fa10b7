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

import operator
import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, overload

import numpy as np

from checkpoint_tool.catalog.grouping import dense_ids, groups

#: bytes.translate table: every ASCII digit to ``0``
_ZERO_DIGITS = bytes(48 if 48 <= b <= 57 else b for b in range(256))
#: names are made this many rows at a time wherever a pass goes over every name (the per-name
#: strings of a block live together, never those of all ~10^5 names)
NAME_BLOCK = 1024
#: int64 holds every number of up to 18 digits
_MAX_DIGITS = 18


class NamePatterns:
    """The names of a table (joined by ``\\n``, with each name's start) by pattern."""

    def __init__(self, text: str, starts: np.ndarray) -> None:
        """``text``: the names joined by line breaks; ``starts``: the offset of each name in
        it, and one past the end (``len(text) + 1``) last."""
        self.joined = text
        self.starts = starts
        n = len(starts) - 1
        if text.isascii():
            raw = text.encode("ascii")
            self.chars: np.ndarray = np.frombuffer(raw, np.uint8)
            zeroed: bytes | str = raw
        else:  # one array item per character, so that offsets are those of ``text``
            self.chars = np.frombuffer(text.encode("utf-32-le"), np.uint32)
            digits = (self.chars >= 48) & (self.chars <= 57)
            zeroed = (
                np.where(digits, 48, self.chars).astype(np.uint32).tobytes().decode("utf-32-le")
            )
        number: dict[bytes | str, int] = {}  # pattern -> its number, in order of first row

        def numbered(line: bytes | str) -> int:
            return number.setdefault(line, len(number))

        # a block of names at a time: the per-name strings never all exist at once
        self.pattern = np.empty(n, np.int32)
        for a in range(0, n, NAME_BLOCK):
            b = min(a + NAME_BLOCK, n)
            block = zeroed[int(starts[a]) : int(starts[b]) - 1]
            if isinstance(block, bytes):
                lines: list[bytes] | list[str] = block.translate(_ZERO_DIGITS).split(b"\n")
            else:
                lines = block.split("\n")
            self.pattern[a:b] = np.fromiter(map(numbered, lines), np.int32, b - a)
        del zeroed
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
        return self.joined[at + start : at + end]

    def names_of(self, rows: np.ndarray) -> list[str]:
        """The names of ``rows``, in their order: ASCII names gathered from the joined
        characters, ``NAME_BLOCK`` rows at a time (the index arrays stay small), and split at
        their line breaks; others one by one."""
        if self.chars.dtype != np.uint8 or not len(rows) or not len(self.chars):
            joined, starts = self.joined, self.starts
            return [joined[starts[r] : starts[r + 1] - 1] for r in rows.tolist()]
        out: list[str] = []
        end = len(self.chars)  # the last name has no line break after it
        for k in range(0, len(rows), NAME_BLOCK):
            part = rows[k : k + NAME_BLOCK]
            begin = self.starts[part]
            size = self.starts[part + 1] - begin  # each name and the line break after it
            at = np.repeat(begin - (np.cumsum(size) - size), size)
            at += np.arange(len(at))
            chars = self.chars[np.minimum(at, end - 1)]
            chars[at == end] = 10
            del at
            out += chars.tobytes().decode("ascii").split("\n")[:-1]
        return out

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
        if not len(rows):
            return
        ids = self.text_ids(rows, start, self.patterns[k][start:end])
        order, bounds = groups(ids, int(ids.max()) + 1)
        parts = [
            rows[order[a:b]] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
        ]
        yield from sorted(parts, key=lambda part: int(part[0]))

    def parts(
        self, whole: np.ndarray | None = None, heads_of: dict[int, int] | None = None
    ) -> tuple[Numbered, Numbered]:
        """Each name split as ``str.rpartition(".")`` splits it: its head
        (``model.layers.3.mlp.experts.7.down_proj``) and its last component (``weight``);
        the rows of ``whole`` keep their whole name as head; the rows of pattern ``k`` in
        ``heads_of`` split after ``heads_of[k]`` characters and one separator (gpt-oss:
        ``X.experts.down_proj_blocks`` -> ``X.experts.down_proj`` and ``blocks``). Heads and
        last components are each numbered in the order of their first row, found per pattern
        (a pattern's names have their last dot at one place) and told apart by their digits."""
        n = len(self.pattern)
        kept = np.zeros(n, bool)
        if whole is not None:
            kept[whole] = True
        heads: dict[str, list[tuple[np.ndarray, int]]] = {}  # head pattern -> (rows, at 0)
        tails: dict[str, list[tuple[np.ndarray, int]]] = {}  # last component -> (rows, at)
        for k, pattern in enumerate(self.patterns):
            rows = self.rows(k)
            dot = pattern.rfind(".")
            if heads_of and k in heads_of:
                cut = heads_of[k]
                tails.setdefault(pattern[cut + 1 :], []).append((rows, cut + 1))
                heads.setdefault(pattern[:cut], []).append((rows, 0))
                continue
            tails.setdefault(pattern[dot + 1 :], []).append((rows, dot + 1))
            keep = kept[rows]
            if keep.any():
                heads.setdefault(pattern, []).append((rows[keep], 0))
                rows = rows[~keep]
            if len(rows):
                heads.setdefault(pattern[: max(dot, 0)], []).append((rows, 0))
        return self._numbered(heads), self._numbered(tails)

    def _numbered(self, spans: dict[str, list[tuple[np.ndarray, int]]]) -> Numbered:
        """Number the texts of ``spans`` (a text pattern -> the rows holding it and where it
        starts in their names) in the order of their first row."""
        n = len(self.pattern)
        key = np.zeros(n, np.int64)
        at = np.zeros(n, np.int64)  # where each row's text starts in the joined names
        forms: list[str] = list(spans)
        counts = np.zeros(len(forms), np.int64)  # per text pattern: its distinct texts
        for f, (pattern, parts) in enumerate(spans.items()):
            rows = np.concatenate([r for r, _ in parts])
            at[rows] = self.starts[rows] + np.concatenate([np.full(len(r), s) for r, s in parts])
            ids = self._text_ids(rows, at[rows], pattern, 0)
            key[rows] = ids + counts.sum()
            counts[f] = int(ids.max()) + 1 if len(ids) else 0
        form = np.repeat(np.arange(len(forms)), counts)  # per key: its text pattern
        order, bounds = groups(key, len(form))
        first = order[bounds[:-1]]  # the first row of each key (a stable sort)
        rank = np.empty(len(form), np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(form))
        by_first = np.sort(first)
        form_of = form[key[by_first]]
        starts = at[by_first]
        ends = starts + np.array([len(f) for f in forms], np.int64)[form_of]
        texts = TextSlices(self.joined, starts, ends)
        return Numbered(rank[key] if n else key, texts, by_first, form_of, forms)

    def text_ids(self, rows: np.ndarray, start: int, pattern: str) -> np.ndarray:
        """A number per row of its text at ``start``, written ``pattern`` (the rows' names hold
        it there, but for their digits): equal texts, equal numbers."""
        return self._text_ids(rows, self.starts[rows], pattern, start)

    def _text_ids(self, rows: np.ndarray, at: np.ndarray, pattern: str, shift: int) -> np.ndarray:
        """A number per row of its text ``pattern`` stands for, starting at ``at + shift`` in
        the joined names: equal texts, equal numbers (only the digits can differ)."""
        places = [i + shift for i, c in enumerate(pattern) if c == "0"]
        if not places:
            return np.zeros(len(rows), np.int64)
        chars = self.chars[at[:, None] + np.array(places)]
        return dense_ids(*chars.T.astype(np.int64))


class TextSlices(Sequence[str]):
    """Texts held as places in one string, each made when asked for: a list of ~46k module
    names of a DeepSeek-R1 would hold ~100 bytes per name, the places hold 16.

    ``TextSlices("l.3\\nl.12", array([0, 4]), array([3, 8]))`` reads as ``["l.3", "l.12"]``
    (and compares equal to that list).
    """

    __slots__ = ("_ends", "_starts", "_text")

    def __init__(self, text: str, starts: np.ndarray, ends: np.ndarray) -> None:
        self._text = text
        # plain arrays: indexing one gives a Python int (a numpy scalar costs ~5x more)
        self._starts = array("q", np.asarray(starts, np.int64).tobytes())
        self._ends = array("q", np.asarray(ends, np.int64).tobytes())

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, k: int) -> str: ...
    @overload
    def __getitem__(self, k: slice) -> list[str]: ...
    def __getitem__(self, k: int | slice) -> str | list[str]:
        if isinstance(k, slice):
            return list(map(self._text.__getitem__, map(slice, self._starts[k], self._ends[k])))
        return self._text[self._starts[k] : self._ends[k]]

    def __iter__(self) -> Iterator[str]:
        return map(self._text.__getitem__, map(slice, self._starts, self._ends))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(map(operator.eq, self, other))

    __hash__ = None  # type: ignore[assignment]  # compares by content, like a list

    def __repr__(self) -> str:
        return f"TextSlices({list(self)!r})"


class Numbered(NamedTuple):
    """Texts numbered per row: ``ids[row]`` indexes ``texts``, ``first[k]`` is the first row
    holding ``texts[k]`` and ``forms[form[k]]`` its pattern, e.g. ``Numbered(ids=array([0, 1,
    0]), texts=["l.3", "l.12"], first=array([0, 1]), form=array([0, 1]), forms=["l.0",
    "l.00"])``."""

    ids: np.ndarray
    texts: TextSlices
    first: np.ndarray
    form: np.ndarray
    forms: list[str]
