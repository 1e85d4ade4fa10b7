"""The prefetch plan: footprints of nodes, merged and cut into segments (pure functions)."""

from __future__ import annotations

from checkpoint_tool.execute.ops import CombineNode, PieceNode
from checkpoint_tool.execute.remote_prefetch import GAP, footprints, segments


def _piece(file: str, base: int, rows: tuple[int, int], shape=(8, 4), itemsize=2) -> PieceNode:
    return PieceNode(file, base, shape, itemsize, (rows, (0, shape[1])))


def test_footprints_are_the_rows_each_piece_reads():
    a = _piece("a", 100, (2, 5))  # rows 2..5 of 8 bytes each
    b = _piece("b", 0, (0, 8))
    both = CombineNode((a, b), "concat", 0)
    assert list(footprints([both])) == [("a", 116, 140), ("b", 0, 64)]


def test_segments_merge_near_spans_of_a_file_and_cut_at_the_limit():
    spans = [("a", 0, 100), ("a", 100 + GAP, 200 + GAP), ("b", 0, 10), ("a", 10**6, 10**6 + 250)]
    got = segments(spans, limit=100)
    assert got[0] == ("a", 0, 100)  # merged with the next span, then cut every 100 bytes
    assert ("b", 0, 10) in got and got[-1] == ("a", 10**6 + 200, 10**6 + 250)
    covered = sum(e - b for _, b, e in got)
    assert covered == (200 + GAP) + 10 + 250  # the merged gap is fetched once, nothing else
