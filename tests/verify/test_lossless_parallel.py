"""The lossless check's fast path (byte runs compared chunk by chunk) and its workers.

- every segment's ``runs`` spell exactly the bytes ``expected()`` builds (the array path is the
  reference), on each preset's real plan, padded ones included;
- the report is the same for 1 and 4 workers, on a clean and on a corrupted output;
- a difference in any chunk of a run (first, middle, last) is found and described like the
  array path describes it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.verify import chunks
from checkpoint_tool.verify.expected import TensorLayout
from checkpoint_tool.verify.lossless import LosslessChecker, check_lossless
from checkpoint_tool.verify.replan import rebuild_plan, require_manifest

from . import corrupt

L1 = "model.layers.1.mlp.experts"


def _plan(src: Path, dst: Path):
    cat = open_catalog(str(src), headers_only=False)
    plan, _ = rebuild_plan(require_manifest(dst), cat)
    return plan, cat


@pytest.mark.parametrize(("preset", "tp"), [("quark-mxfp4", 1), ("deepseek-v3-fp8", 2),
                                            ("quark-nvfp4", 2), ("quark-hybrid", 2)])  # fmt: skip
def test_runs_spell_the_expected_bytes(converted, preset: str, tp: int) -> None:
    src, dst = converted(preset, tp=tp)
    plan, cat = _plan(src, dst)
    checker = LosslessChecker(plan, cat, dst, 1 << 12, 50, None, workers=1)  # type: ignore[arg-type]
    with_runs = padded = 0
    try:
        for f in plan.files:
            for t in f.tensors:
                layout = TensorLayout(t, checker.lookup)
                for seg in layout.segments(checker.read_source_rows, 1 << 12):
                    if seg.runs is None:
                        continue
                    with_runs += 1
                    padded += any(r.source is None for r in seg.runs)
                    got = b"".join(
                        (r.fill * r.length)[: r.length]
                        if r.source is None
                        else _source_bytes(checker, r.source, r.offset, r.length)
                        for r in seg.runs
                    )
                    assert sum(r.length for r in seg.runs) == seg.stop - seg.start
                    assert got == seg.expected().tobytes(), (t.name, seg.start)
    finally:
        checker.close()
    assert with_runs > 0
    if preset == "deepseek-v3-fp8":
        assert padded > 0  # TP 2 pads I 128 -> 256: fill runs are exercised


def _source_bytes(checker: LosslessChecker, name: str, offset: int, length: int) -> bytes:
    where = checker.source_range(name)
    assert where is not None
    return checker.files.read(where[0], where[1] + offset, where[1] + offset + length)


def _dump(report) -> dict:
    out = report.model_dump()
    out.pop("seconds")
    return out


@pytest.mark.parametrize("preset", ["quark-mxfp4", "deepseek-v3-fp8"])
def test_same_report_for_any_worker_count(converted, dst_copy, preset: str) -> None:
    src, dst = converted(preset, tp=2)
    plan, cat = _plan(src, dst)
    clean = [_dump(check_lossless(plan, cat, dst, workers=w, budget=1 << 12)) for w in (1, 4)]
    assert clean[0] == clean[1] and clean[0]["status"] == "passed"
    bad = dst_copy(dst)
    names = sorted(n for f in plan.files for n in (t.name for t in f.tensors) if ".experts." in n)
    rng = random.Random(7)
    for name in rng.sample(names, 6):
        corrupt.flip_bytes(bad, name, offset=0, count=1)
    failed = [_dump(check_lossless(plan, cat, bad, workers=w, budget=1 << 12)) for w in (1, 4)]
    assert failed[0] == failed[1]
    assert failed[0]["status"] == "failed" and len(failed[0]["mismatches"]) == 6


@pytest.mark.parametrize("compare", ["numpy", "memcmp"])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_difference_in_any_chunk_is_found(
    converted, dst_copy, monkeypatch, where: str, compare: str
) -> None:
    monkeypatch.setattr(chunks, "CHUNK", 48)  # many chunks per run, a ragged tail
    monkeypatch.setattr(chunks, "COMPARE", compare)
    src, dst = converted("quark-mxfp4", tp=1)
    plan, cat = _plan(src, dst)
    bad = dst_copy(dst)
    name = f"{L1}.3.up_proj.weight"  # U8 [128, 128]
    size = len(corrupt.read(bad, name))
    offset = {"first": 3, "middle": size // 2 + 5, "last": size - 1}[where]
    corrupt.flip_bytes(bad, name, offset=offset, count=1)
    report = check_lossless(plan, cat, bad, workers=2)
    (m,) = report.mismatches
    assert m.tensor == name and m.elements_differ == 1
    assert m.first_index == [offset // 128, offset % 128]


def test_truncated_output_is_unreadable_not_an_error(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    plan, cat = _plan(src, dst)
    bad = dst_copy(dst)
    shard = sorted(bad.glob("*.safetensors"))[-1]
    with open(shard, "r+b") as fh:
        fh.truncate(shard.stat().st_size - 100)
    report = check_lossless(plan, cat, bad, workers=3)
    kinds = {m.kind for m in report.mismatches}
    assert report.status == "failed" and kinds == {"unreadable"}
