"""Tensor names as text parts and numbers, parsed for a whole column at once.

``model.layers.3.mlp.experts.17.down_proj.weight`` is the pattern
``model.layers.\\0.mlp.experts.\\0.down_proj.weight`` with the numbers 3 and 17. A full-size
checkpoint has ~10^5 names but a few dozen patterns: what depends on a name's shape is
decided once per pattern (its file group, its text parts' sort ranks), and the numbers come
from two regex passes over the joined names, at C speed. The planner's file grouping and
natural order (``plan.sharding``) read these columns instead of parsing name by name.

The catalog's ``NamePatterns`` keeps one pattern per name *length* (each digit a ``0``), to
read digits at fixed places of the source names it holds joined. Here a run of digits of any
width is one number, as natural order needs (``layers.9`` before ``layers.10``), and the
output names (renamed, not held joined) are read a block at a time.

Example::

    parts = NameParts.of(lambda: [["layers.10.w1", "layers.2.w1", "embed.weight"]])
    parts.patterns   # ['layers.\\x00.w\\x00', 'embed.weight']
    parts.numbers    # array([10, 1, 2, 1])
    parts.group_codes(layer_pattern, mtp_pattern)   # (section << 32) + index per name
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from checkpoint_tool.catalog.grouping import groups

_DIGITS = re.compile(r"\d+")
#: stands for one run of digits in a pattern (no name the parser accepts holds it)
MARK = "\0"
_MARKS = re.compile(MARK + "+")
_DIGIT_TO_MARK = bytes(0 if 48 <= b <= 57 else b for b in range(256))
_SPACE_BUT_DIGITS = bytes(b if 48 <= b <= 57 else 32 for b in range(256))


@dataclass(frozen=True)
class NameParts:
    """``pid[k]``: the pattern of name ``k``; ``numbers[start[k]:start[k] + count[k]]``: its
    numbers, in order; ``patterns``: the distinct patterns (``MARK`` for each number)."""

    pid: np.ndarray
    patterns: list[str]
    numbers: np.ndarray
    start: np.ndarray
    count: np.ndarray

    @classmethod
    def of(cls, blocks: Callable[[], Iterable[list[str]]]) -> NameParts | None:
        """The parts of the names ``blocks()`` gives (blocks of names, in order); None when
        a name holds ``MARK`` or a line break, or a number of more than 18 digits (too long
        for int64): the caller parses those names one by one.

        ASCII names (every real checkpoint's) are parsed as bytes, a block at a time:
        digits become marks (one per digit, collapsed per distinct pattern afterwards) and
        the numbers are what is left when every other byte is a space. Other names take the
        regex (``\\d`` is any Unicode digit there, as in ``natural_key``)."""
        collapsed: dict[str, int] = {}
        raw_patterns: dict[bytes, int] = {}
        pids: list[np.ndarray] = []
        numbers: list[np.ndarray] = []
        for block in blocks():
            text = "\n".join(block)
            if MARK in text or text.count("\n") != max(0, len(block) - 1):
                return None
            if not text.isascii():
                every = [n for b in blocks() for n in b]
                return cls._of_regex(every, "\n".join(every))
            raw = text.encode("ascii")
            del text
            runs = raw.translate(_SPACE_BUT_DIGITS).split()
            if max(map(len, runs), default=0) > 18:
                return None
            numbers.append(np.fromiter(map(int, runs), np.int64, len(runs)))
            del runs
            lines = raw.translate(_DIGIT_TO_MARK).split(b"\n") if block else []
            del raw
            for p in dict.fromkeys(lines):
                raw_patterns.setdefault(p, len(raw_patterns))
            pids.append(np.fromiter(map(raw_patterns.__getitem__, lines), np.int64, len(lines)))
        pid_of = np.array(
            [
                collapsed.setdefault(_MARKS.sub(MARK, p.decode("ascii")), len(collapsed))
                for p in raw_patterns
            ],
            np.int64,
        )
        pid = pid_of[np.concatenate(pids)] if pids and len(pid_of) else np.zeros(0, np.int64)
        flat = np.concatenate(numbers) if numbers else np.zeros(0, np.int64)
        return cls._make(pid, list(collapsed), flat)

    @classmethod
    def _of_regex(cls, names: list[str], text: str) -> NameParts | None:
        runs = _DIGITS.findall(text)
        if max(map(len, runs), default=0) > 18:
            return None
        split = _DIGITS.sub(MARK, text).split("\n") if names else []
        number_of = {p: k for k, p in enumerate(dict.fromkeys(split))}
        pid = np.fromiter(map(number_of.__getitem__, split), np.int64, len(names))
        numbers = np.fromiter(map(int, runs), np.int64, len(runs))
        return cls._make(pid, list(number_of), numbers)

    @classmethod
    def _make(cls, pid: np.ndarray, patterns: list[str], numbers: np.ndarray) -> NameParts:
        count = np.array([p.count(MARK) for p in patterns], np.int64)[pid]
        start = np.zeros(len(pid), np.int64)
        np.cumsum(count[:-1], out=start[1:])
        return cls(pid, patterns, numbers, start, count)

    def by_pattern(self) -> list[np.ndarray]:
        """The rows of each pattern (index: pattern number), each in row order."""
        order, bounds = groups(self.pid, len(self.patterns))
        return [order[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]

    def number(self, rows: np.ndarray, k: int) -> np.ndarray:
        """The ``k``-th number of each of ``rows`` (all of whose patterns have one)."""
        return self.numbers[self.start[rows] + k]

    def natural_columns(self) -> list[np.ndarray]:
        """``natural_key`` (``plan.sharding``) of every name as integer columns, most
        significant first: sorting the rows by them (``np.lexsort`` of the reversed list)
        orders the names as ``sorted(names, key=natural_key)`` does, equal keys giving
        equal rows.

        A key alternates text parts and numbers (``"layers.3.w1"`` -> ``"layers."``, 3,
        ``".w"``, 1, ``""``); a text part becomes its rank among the text parts found at
        the same place in any pattern, a number itself, and a shorter key is padded with -1
        (a prefix sorts first, as tuples do)."""
        texts = [p.split(MARK) for p in self.patterns]
        width = max((len(t) for t in texts), default=1)
        ranks = [
            {t: r for r, t in enumerate(sorted({parts[i] for parts in texts if len(parts) > i}))}
            for i in range(width)
        ]
        n = len(self.pid)
        columns = [np.full(n, -1, np.int64) for _ in range(2 * width - 1)]
        for parts, rows in zip(texts, self.by_pattern(), strict=True):
            for i, part in enumerate(parts):
                columns[2 * i][rows] = ranks[i][part]
                if i + 1 < len(parts):
                    columns[2 * i + 1][rows] = self.number(rows, i)
        return columns

    def codes(self, rule: dict[str, tuple[int, int | None]]) -> np.ndarray:
        """Per name, ``(section << 32) + index`` where ``rule[pattern]`` is the pattern's
        ``(section, which number is the index, or None for index 0)``."""
        out = np.zeros(len(self.pid), np.int64)
        for pattern, rows in zip(self.patterns, self.by_pattern(), strict=True):
            section, k = rule[pattern]
            index = self.number(rows, k) if k is not None else 0
            out[rows] = (section << 32) + index
        return out


def mark_index(pattern: str, at: int) -> int:
    """Which number of ``pattern`` sits at character ``at`` (a ``MARK``)."""
    return pattern.count(MARK, 0, at)
