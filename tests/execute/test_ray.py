"""``--executor ray`` on a local Ray (2 CPUs, one session for the module: Ray starts slowly):
byte-identical to one host for any task count; a killed worker's task is retried."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is optional: pip install 'checkpoint-tool[ray]'")

from checkpoint_tool.catalog import open_local  # noqa: E402
from checkpoint_tool.cli.app import main  # noqa: E402
from checkpoint_tool.execute import execute_plan  # noqa: E402
from checkpoint_tool.execute.distributed import ray_pool  # noqa: E402
from checkpoint_tool.execute.distributed.ray_pool import RayPool  # noqa: E402

from .helpers import tiny_moe_tensors, tiny_plan, tree_bytes, write_source  # noqa: E402


@pytest.fixture(scope="module")
def ray_session(tmp_path_factory):
    """One local Ray for the module. Workers inherit the kill-once hook's variable; its marker
    exists, so the hook stays off until a test removes the marker."""
    marker = tmp_path_factory.mktemp("ray") / "kill-once"
    marker.touch()
    os.environ[ray_pool.KILL_ONCE_ENV] = str(marker)
    # workers run with DURABLE on (another process): fine, only slower
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield marker
    finally:
        ray.shutdown()
        del os.environ[ray_pool.KILL_ONCE_ENV]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = write_source(tmp_path_factory.mktemp("src") / "src", tiny_moe_tensors(seed=21))
    plan = tiny_plan(root)
    dst = tmp_path_factory.mktemp("ref") / "dst"
    execute_plan(plan, open_local(root), dst, progress=False)
    return root, plan, tree_bytes(dst)


@pytest.mark.parametrize("tasks", [1, 3])
def test_ray_tasks_give_the_single_host_bytes(ray_session, reference, tmp_path, tasks):
    root, plan, ref = reference
    dst = tmp_path / "dst"
    report = execute_plan(plan, open_local(root), dst, progress=False, pool=RayPool(tasks=tasks))
    assert report.files_written == len(plan.files) and report.workers == tasks
    assert tree_bytes(dst) == ref


def test_killed_worker_is_retried(ray_session, reference, tmp_path):
    root, plan, ref = reference
    ray_session.unlink()  # the next task to write a byte kills its worker, once
    dst = tmp_path / "dst"
    execute_plan(plan, open_local(root), dst, progress=False, pool=RayPool(tasks=2))
    assert ray_session.exists()  # the hook fired: one worker died and its task ran again
    assert tree_bytes(dst) == ref  # no temporaries left, same manifest


def test_cli_executor_ray(ray_session, monkeypatch, capsys, synth_ckpt, tmp_path):
    src = str(synth_ckpt("quark-hybrid"))
    opts = ("--tp", "2", "--max-shard-size", "1MB", "--format", "json")
    outs: list[Path] = []
    for name, extra in (("one", ()), ("ray", ("--executor", "ray", "--ray-tasks", "2"))):
        monkeypatch.setattr(sys, "argv", ["ckpt", "convert", src, str(tmp_path / name), *opts,
                                          *extra])  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            main()
        out = capsys.readouterr()
        assert exc.value.code in (0, None), out.err
        outs.append(tmp_path / name)
        report = json.loads(out.out)
    assert report["workers"] == 2 and re.search(r"^\[ *1/", out.err, re.M)  # the driver's progress lines
    assert tree_bytes(outs[0]) == tree_bytes(outs[1])


def test_verify_with_ray_tasks_equals_one_host(ray_session, synth_ckpt, tmp_path):
    from checkpoint_tool.plan.build import plan_for_catalog
    from checkpoint_tool.plan.model import PlanOptions
    from checkpoint_tool.verify import VerifyOptions, verify_checkpoint
    from checkpoint_tool.verify.spread import verify_ray

    src = synth_ckpt("quark-hybrid")
    cat = open_local(src)
    plan = plan_for_catalog(cat, PlanOptions(tp=2, max_shard_size=1_000_000))
    dst = tmp_path / "out"
    execute_plan(plan, cat, dst, progress=False)
    one = verify_checkpoint(dst, str(src), VerifyOptions(numeric=False)).lossless
    spread = verify_ray(dst, str(src), address=None, tasks=2, budget=1 << 20, max_listed=50)
    assert spread.passed and one.status == "passed"
    for k in ("files_checked", "tensors_checked", "tensors_padded", "bytes_compared"):
        assert getattr(spread.lossless, k) == getattr(one, k), k
