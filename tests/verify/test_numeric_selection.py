"""``--layers all|sample|N``, ``--max-seconds``, per-layer progress and seconds.

quark-hybrid at TP 2: the policy sample is layers 1, 2, 3; layer 4 (the MTP layer, same policy
as 3) runs only with ``--layers all``.
"""

from __future__ import annotations

import pytest

from checkpoint_tool.cli.verify import _layers
from checkpoint_tool.errors import UsageError
from checkpoint_tool.verify import VerifyOptions, verify_checkpoint
from checkpoint_tool.verify.report import LayerResult
from checkpoint_tool.verify.sampling import spread_order

from . import corrupt

NUMERIC = VerifyOptions(lossless=False, backend="torch", device="cpu", tokens=32)


def _numeric(dst, src, progress=None, **kw: object):
    options = NUMERIC.model_copy(update=kw)
    return verify_checkpoint(dst, str(src), options, layer_progress=progress).numeric


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 13, 58])
def test_spread_order_is_a_permutation_that_spreads(n: int) -> None:
    order = spread_order(n)
    assert sorted(order) == list(range(n))
    if n >= 2:
        assert order[:2] == [0, n - 1]
    if n >= 9:  # the first few already cover every quarter
        firsts = order[:5]
        assert all(any(q * n // 4 <= i < (q + 1) * n // 4 for i in firsts) for q in range(4))


def test_all_runs_every_layer_sample_first(converted) -> None:
    src, dst = converted("quark-hybrid", tp=2)
    sample = _numeric(dst, src)
    everything = _numeric(dst, src, layers="all")
    assert sample.selection == "sample" and [r.layer for r in sample.layers] == [1, 2, 3]
    assert everything.selection == "all" and [r.layer for r in everything.layers] == [1, 2, 3, 4]
    assert everything.status == "passed" and everything.not_run_layers == []
    for r in everything.layers:
        # the source's decode and reference run while the converted side is read (inside
        # read_seconds); the reads and the runtime follow one another
        assert r.read_seconds > 0 and r.decode_seconds > 0 and r.runtime_seconds > 0
        assert r.decode_seconds + r.reference_seconds <= r.read_seconds + 0.01, r
        assert r.read_seconds + r.runtime_seconds <= r.seconds + 0.01, r


def test_all_finds_a_defect_the_sample_does_not_run(converted, dst_copy) -> None:
    src, dst = converted("quark-hybrid", tp=2)
    bad = dst_copy(dst)
    corrupt.zero(bad, "model.layers.4.mlp.experts.8.down_proj.weight")  # layer 4's shared slot
    assert _numeric(bad, src).status == "passed"
    report = _numeric(bad, src, layers="all")
    assert report.status == "failed"
    assert {r.layer: r.status for r in report.layers}[4] == "failed"


def test_max_seconds_stops_extra_layers_never_the_sample(converted) -> None:
    src, dst = converted("quark-hybrid", tp=2)
    report = _numeric(dst, src, layers="all", max_seconds=0.001)
    assert [r.layer for r in report.layers] == [1, 2, 3]  # every policy still ran
    assert report.not_run_layers == [4] and report.max_seconds == 0.001
    assert report.status == "passed" and "--max-seconds" in (report.reason or "")
    roomy = _numeric(dst, src, layers="all", max_seconds=3600)
    assert roomy.not_run_layers == [] and len(roomy.layers) == 4


def test_progress_sees_every_layer(converted) -> None:
    src, dst = converted("quark-hybrid", tp=2)
    seen: list[object] = []

    class Recorder:
        def start(self, total: int) -> None:
            seen.append(("start", total))

        def layer_done(self, result: LayerResult) -> None:
            seen.append(result.layer)

        def close(self) -> None:
            seen.append("close")

    _numeric(dst, src, progress=Recorder(), layers="all")
    assert seen[0] == ("start", 4) and seen[-1] == "close"
    assert sorted(seen[1:-1]) == [1, 2, 3, 4]  # type: ignore[type-var]


def test_layers_option_text() -> None:
    assert _layers("all") == "all" and _layers(" sample ") == "sample"
    assert _layers("3-5,7") == [3, 4, 5, 7] and _layers(None) is None
    with pytest.raises(UsageError, match="--layers"):
        _layers("every")
