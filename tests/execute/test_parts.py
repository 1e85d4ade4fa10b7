"""Array-job parts: any split into parts + --finalize gives the bytes and manifest of one host;
a killed part resumes on its own; a missing or mismatched part is a one-line error naming it."""

from __future__ import annotations

import os
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_tool.catalog import open_local
from checkpoint_tool.errors import OutputError, UsageError
from checkpoint_tool.execute import execute_plan, faults
from checkpoint_tool.execute.distributed.parts import (
    PART_RE,
    execute_part,
    finalize,
    part_name,
)
from checkpoint_tool.execute.distributed.split import parse_part, split_files
from checkpoint_tool.execute.manifest import MANIFEST_NAME

from .helpers import tiny_moe_tensors, tiny_plan, tree_bytes, write_source


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Source, plan and the single-host output's bytes (manifest included)."""
    root = write_source(tmp_path_factory.mktemp("src") / "src", tiny_moe_tensors(seed=11))
    plan = tiny_plan(root)
    dst = tmp_path_factory.mktemp("ref") / "dst"
    execute_plan(plan, open_local(root), dst, progress=False)
    return root, plan, tree_bytes(dst)


def run_parts(root, plan, dst, n: int, order=None) -> None:
    for i in order or range(n):
        execute_part(plan, open_local(root), dst, i, n, progress=False)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_any_split_then_finalize_is_byte_identical_to_one_host(reference, tmp_path, n):
    root, plan, ref = reference
    dst = tmp_path / "dst"
    run_parts(root, plan, dst, n, order=reversed(range(n)))  # any order
    assert not (dst / MANIFEST_NAME).exists()
    assert sorted(p.name for p in dst.iterdir() if PART_RE.match(p.name)) == [
        part_name(i, n) for i in range(n)
    ]
    finalize(plan, open_local(root), dst, progress=False)
    assert tree_bytes(dst) == ref  # same files, same manifest, no part records left


def test_each_part_writes_only_its_share(reference, tmp_path):
    root, plan, _ = reference
    dst = tmp_path / "dst"
    report = execute_part(plan, open_local(root), dst, 0, 2, progress=False)
    weights = sorted(p.name for p in dst.iterdir() if p.name.endswith(".safetensors"))
    assert weights == sorted(report.files) and 0 < len(weights) < len(plan.files)


def test_split_is_the_documented_greedy_one():
    assert split_files([5, 5, 3, 2, 1], 2) == [[0, 2], [1, 3, 4]]
    assert split_files([1, 2], 4) == [[1], [0], [], []]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10**10), max_size=40), st.integers(1, 9))
def test_split_covers_every_file_once_and_balances(sizes, n):
    parts = split_files(sizes, n)
    assert sorted(i for p in parts for i in p) == list(range(len(sizes)))
    assert all(p == sorted(p) for p in parts)
    loads = [sum(sizes[i] for i in p) for p in parts]
    # greedy largest-first: no part exceeds the lightest by more than the largest file
    assert max(loads) - min(loads) <= max(sizes, default=0)
    assert split_files(list(sizes), n) == parts  # deterministic


@pytest.mark.parametrize("text", ["3/3", "-1/2", "a/b", "1", "0/0"])
def test_bad_part_is_a_usage_error(text):
    with pytest.raises(UsageError, match="--part"):
        parse_part(text)


def test_missing_part_is_named(reference, tmp_path):
    root, plan, _ = reference
    dst = tmp_path / "dst"
    execute_part(plan, open_local(root), dst, 0, 3, progress=False)
    execute_part(plan, open_local(root), dst, 2, 3, progress=False)
    with pytest.raises(OutputError, match=r"\.ckpt-part-0001-of-0003\.json: part 1/3 is missing"):
        finalize(plan, open_local(root), dst, progress=False)
    assert not (dst / MANIFEST_NAME).exists()


def test_part_of_another_plan_is_refused(reference, tmp_path):
    root, plan, _ = reference
    other = tiny_plan(root, tp=2)
    dst = tmp_path / "dst"
    execute_part(plan, open_local(root), dst, 0, 2, progress=False)
    with pytest.raises(OutputError, match="part 0/2 of a different plan"):
        execute_part(other, open_local(root), dst, 1, 2, progress=False)
    execute_part(plan, open_local(root), dst, 1, 2, progress=False)
    with pytest.raises(OutputError, match=r"part 0/2 does not match this plan"):
        finalize(other, open_local(root), dst, progress=False)


def test_other_split_sizes_are_refused(reference, tmp_path):
    root, plan, _ = reference
    dst = tmp_path / "dst"
    execute_part(plan, open_local(root), dst, 0, 2, progress=False)
    with pytest.raises(OutputError, match="different plan or split"):
        execute_part(plan, open_local(root), dst, 0, 3, progress=False)


def test_file_changed_after_its_part_is_named(reference, tmp_path):
    root, plan, _ = reference
    dst = tmp_path / "dst"
    run_parts(root, plan, dst, 2)
    victim = dst / plan.files[1].name
    data = bytearray(victim.read_bytes())
    data[-1] ^= 1
    victim.write_bytes(bytes(data))  # same size, new mtime
    with pytest.raises(OutputError, match=f"{victim.name}: missing or changed since part"):
        finalize(plan, open_local(root), dst, progress=False)


def test_rerun_of_a_part_needs_resume(reference, tmp_path):
    root, plan, _ = reference
    dst = tmp_path / "dst"
    execute_part(plan, open_local(root), dst, 0, 2, progress=False)
    with pytest.raises(OutputError, match="--part 0/2 --resume"):
        execute_part(plan, open_local(root), dst, 0, 2, progress=False)
    report = execute_part(plan, open_local(root), dst, 0, 2, progress=False, resume=True)
    assert report.resumed and report.files_written == 0 and report.files_kept == len(report.files)


def test_foreign_file_in_dst_is_refused(reference, tmp_path):
    root, plan, _ = reference
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"notes\.txt: not written by ckpt"):
        execute_part(plan, open_local(root), dst, 0, 2, progress=False)


def _killed_part(root, plan, dst, part, parts, kill_at: int, resume: bool = False) -> int:
    pid = os.fork()
    if pid == 0:  # child: SIGKILL itself at fault point kill_at
        code = 0
        try:
            os.environ["CKPT_FAULT_KILL_AT"] = str(kill_at)
            faults.reset()
            execute_part(plan, open_local(root), dst, part, parts, progress=False, resume=resume)
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


@pytest.fixture(scope="module")
def part0_points(reference, tmp_path_factory) -> int:
    """Fault points of part 0/2 alone (chunks, tensors, commits, record updates)."""
    root, plan, _ = reference
    os.environ["CKPT_FAULT_KILL_AT"] = str(10**9)  # count, never kill
    faults.reset()
    try:
        execute_part(plan, open_local(root), tmp_path_factory.mktemp("p0") / "d", 0, 2,
                     progress=False)  # fmt: skip
        return faults._count
    finally:
        del os.environ["CKPT_FAULT_KILL_AT"]


@pytest.mark.parametrize("where", [0.0, 0.3, 0.6, 1.0])
def test_killed_part_resumes_and_finalizes_byte_identical(
    reference, part0_points, tmp_path, where
):
    root, plan, ref = reference
    assert part0_points > 8
    kill_at = max(1, round(where * part0_points))
    dst = tmp_path / "dst"
    execute_part(plan, open_local(root), dst, 1, 2, progress=False)
    status = _killed_part(root, plan, dst, 0, 2, kill_at)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    for name, data in tree_bytes(dst).items():  # nothing incomplete under a final name
        if name.endswith(".safetensors"):
            assert data == ref[name], name
    if where < 1.0:  # killed before its last record update: finalize names the part
        with pytest.raises(OutputError, match="part 0/2"):
            finalize(plan, open_local(root), dst, progress=False)
    execute_part(plan, open_local(root), dst, 0, 2, progress=False, resume=True)
    finalize(plan, open_local(root), dst, progress=False)
    assert tree_bytes(dst) == ref
