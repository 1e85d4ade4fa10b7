"""Read-ahead of the source: the ranges a file reads, merged in output order, requested a
bounded distance ahead of what the writer consumed."""

from __future__ import annotations

import os
import threading
import time

from checkpoint_tool.catalog import open_local
from checkpoint_tool.execute import readahead as prefetch
from checkpoint_tool.execute.tree import build_node

from .helpers import tiny_moe_tensors, tiny_plan, write_source


def test_ranges_cover_every_source_byte_each_tensor_reads(tmp_path):
    root = write_source(tmp_path / "src", tiny_moe_tensors(seed=3))
    cat = open_local(root)
    plan = tiny_plan(root)
    for f in plan.files:
        for t in f.tensors:
            ranges = prefetch.node_ranges(build_node(t, cat.tensors))
            for piece in t.pieces:  # each source tensor's bytes lie inside one requested range
                e = cat.tensors[piece.source]
                hit = [r for r in ranges if r[0] == e.file and r[1] <= e.begin and e.end <= r[2]]
                sliced = [r for r in ranges if r[0] == e.file and e.begin <= r[1] < r[2] <= e.end]
                assert hit or sliced, (t.name, piece.source)


def test_merge_keeps_order_and_joins_neighbours():
    got = prefetch.merge_ranges(
        [("a", 0, 10), ("a", 10, 20), ("b", 0, 5), ("a", 20, 30), ("a", 30 + (2 << 20), 40 << 20)]
    )
    assert got == [("a", 0, 20), ("b", 0, 5), ("a", 20, 30), ("a", 30 + (2 << 20), 40 << 20)]


def test_requests_stay_within_the_window_until_consumed(monkeypatch):
    calls: list[tuple[int, int]] = []
    seen = threading.Event()

    def fake(fd, offset, length, advice):
        assert advice == os.POSIX_FADV_WILLNEED
        calls.append((offset, length))
        seen.set()

    monkeypatch.setattr(os, "posix_fadvise", fake)
    step = prefetch.STEP
    pf = prefetch.Prefetcher([(3, 0, 10 * step)], ahead=2 * step)
    seen.wait(2)
    time.sleep(0.2)  # let it run as far as it may
    assert len(calls) == 2  # never more than `ahead` bytes beyond what was consumed
    pf.consumed(4 * step)
    deadline = time.monotonic() + 2
    while len(calls) < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert len(calls) == 6
    pf.close()
    assert [o for o, _ in calls] == [i * step for i in range(6)]


def test_a_run_requests_every_source_tensor_it_reads(tmp_path, monkeypatch):
    from checkpoint_tool.execute import execute_plan

    root = write_source(tmp_path / "src", tiny_moe_tensors(seed=4))
    cat = open_local(root)
    plan = tiny_plan(root)
    asked: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def record(fd, offset, length, advice):
        if advice == os.POSIX_FADV_WILLNEED:
            asked.append((os.fstat(fd).st_ino, offset, offset + length))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)

    def finish(self):  # let the thread issue everything (a file of a few kB ends before it)
        if self._thread is not None:
            self._thread.join()

    monkeypatch.setattr(prefetch.Prefetcher, "close", finish)
    execute_plan(plan, cat, tmp_path / "dst", progress=False)
    for t in (t for f in plan.files for t in f.tensors):
        for piece in t.pieces:
            e = cat.tensors[piece.source]
            ino = (root / e.file).stat().st_ino
            assert any(i == ino and b <= e.begin and e.end <= end for i, b, end in asked) or any(
                i == ino and e.begin <= b < end <= e.end for i, b, end in asked
            ), piece.source
