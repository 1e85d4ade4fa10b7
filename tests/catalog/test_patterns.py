"""Name patterns and row grouping (``catalog.patterns``, ``catalog.grouping``) against the
answer name by name, on synthetic checkpoints and on odd names."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.catalog.grouping import dense_ids, first_rows, groups
from checkpoint_tool.catalog.patterns import NamePatterns

PRESETS = ["deepseek-v3-fp8", "quark-hybrid", "deepseek-v4", "qwen3-moe", "modelopt-nvfp4"]
#: every name of a pattern has its digits where the pattern has a 0
_ZERO = str.maketrans("0123456789", "0" * 10)


def test_dense_ids_number_the_distinct_combinations():
    a = np.array([7, 3, 7, 3, 7])
    b = np.array([1, 0, 1, 2, 0])
    ids = dense_ids(a, b)
    pairs = sorted(set(zip(a.tolist(), b.tolist(), strict=True)))
    assert ids.tolist() == [pairs.index(p) for p in zip(a.tolist(), b.tolist(), strict=True)]
    # wide values fold without overflow and stay exact
    big = np.array([2**40, 5, 2**40, 5], np.int64)
    assert dense_ids(big, big, big, np.array([0, 0, 1, 0])).tolist() == [1, 0, 2, 0]
    order, start = groups(ids, int(ids.max()) + 1)
    for k in range(int(ids.max()) + 1):
        assert order[start[k] : start[k + 1]].tolist() == np.flatnonzero(ids == k).tolist()


@pytest.mark.parametrize("preset", PRESETS)
def test_patterns_agree_with_each_name(synth_ckpt, preset):
    table = open_catalog(synth_ckpt(preset)).table
    names = table.names()
    p = table.patterns()
    assert p.patterns == list(dict.fromkeys(n.translate(_ZERO) for n in names))
    for k, pattern in enumerate(p.patterns):
        rows = p.rows(k)
        assert rows.tolist() == [r for r, n in enumerate(names) if n.translate(_ZERO) == pattern]
        for m in re.finditer(r"0+", pattern):
            a, b = m.span()
            assert p.numbers(rows, a, b).tolist() == [int(names[r][a:b]) for r in rows.tolist()]
            assert [p.text(r, 0, b) for r in rows.tolist()] == [names[r][:b] for r in rows.tolist()]
            split = [g.tolist() for g in p.split_by(k, rows, 0, b)]
            by_text: dict[str, list[int]] = {}
            for r in rows.tolist():
                by_text.setdefault(names[r][:b], []).append(r)
            assert split == list(by_text.values())


def _parts_by_name(names: list[str], whole: set[int]) -> tuple[list, list]:
    """Head and last component of each name, each numbered in order of first appearance."""
    heads: dict[str, int] = {}
    tails: dict[str, int] = {}
    out_h, out_t = [], []
    for row, name in enumerate(names):
        head, _, tail = name.rpartition(".")
        out_h.append(heads.setdefault(name if row in whole else head, len(heads)))
        out_t.append(tails.setdefault(tail, len(tails)))
    return (out_h, list(heads)), (out_t, list(tails))


@pytest.mark.parametrize("preset", PRESETS)
def test_parts_split_each_name_at_its_last_dot(synth_ckpt, preset):
    table = open_catalog(synth_ckpt(preset)).table
    names = table.names()
    whole = np.arange(0, len(names), 7)  # some rows keep their whole name as head
    heads, tails = table.patterns().parts(whole)
    (h_ids, h_texts), (t_ids, t_texts) = _parts_by_name(names, set(whole.tolist()))
    assert (heads.ids.tolist(), heads.texts) == (h_ids, h_texts)
    assert (tails.ids.tolist(), tails.texts) == (t_ids, t_texts)
    for got in (heads, tails):
        assert got.first.tolist() == [got.ids.tolist().index(k) for k in range(len(got.texts))]
        zeroed = [t.translate(_ZERO) for t in got.texts]
        assert [got.forms[f] for f in got.form.tolist()] == zeroed


def test_odd_names_long_numbers_and_other_scripts():
    names = ["a.12345678901234567890.w", "b.ä.3", "b.ä.4", "c", "", "b.ä.10", "b.ä.٣"]
    p = NamePatterns.of_names(names)
    assert p.patterns == ["a." + "0" * 20 + ".w", "b.ä.0", "c", "", "b.ä.00", "b.ä.٣"]
    assert p.numbers(p.rows(5), 4, 5).tolist() == [3]  # int() of other digits
    assert p.numbers(p.rows(0), 2, 22).tolist() == [12345678901234567890]
    assert p.numbers(p.rows(1), 4, 5).tolist() == [3, 4]
    assert p.text(2, 0, 3) == "b.ä" and p.text(5, 4, 6) == "10"
    assert [g.tolist() for g in p.split_by(1, p.rows(1), 4, 5)] == [[1], [2]]
    heads, tails = p.parts()
    (h_ids, h_texts), (t_ids, t_texts) = _parts_by_name(names, set())
    assert (heads.ids.tolist(), heads.texts, tails.ids.tolist(), tails.texts) == (
        h_ids,
        h_texts,
        t_ids,
        t_texts,
    )


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.lists(
            st.lists(st.integers(-1, 5), min_size=n, max_size=n)
            | st.lists(st.integers(-(2**40), 2**40), min_size=n, max_size=n),
            min_size=1,
            max_size=6,
        )
    )
)
def test_distinct_rows_are_the_distinct_tuples(columns):
    """Numbered combinations (small ranges, negatives, ranges folded as they grow) and their
    first rows are the distinct tuples and where each first appears."""
    cols = [np.array(c, np.int64) for c in columns]
    inverse = dense_ids(*cols)
    count = int(inverse.max()) + 1
    first = first_rows(inverse, count)
    rows = list(zip(*columns, strict=True))
    assert count == len(set(rows)) == len(first)
    assert all(rows[first[inverse[k]]] == rows[k] for k in range(len(rows)))
    assert len({rows[k] for k in first.tolist()}) == count
    assert all(rows.index(rows[k]) == k for k in first.tolist())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(st.characters(exclude_characters="\n", exclude_categories=["Cs"]), max_size=12),
        min_size=1,
        max_size=30,
    ),
    st.data(),
)
def test_names_of_gathers_the_names_of_any_rows(names, data):
    """ASCII tables take the array gather, others the slices: both give the rows' names."""
    rows = data.draw(st.lists(st.integers(0, len(names) - 1), max_size=40))
    patterns = NamePatterns.of_names(names)
    got = patterns.names_of(np.array(rows, np.int64))
    assert got == [names[r] for r in rows]
    assert patterns.names_of(np.arange(len(names))) == names
