"""Each output file a Ray task: ``ckpt convert SRC DST --executor ray [--ray-address A]``.

The driver (the ``ckpt`` process) checks the plan, prepares DST and its journal exactly as a
single-host run, then submits one task per weight file still to write, at most ``tasks`` in
flight (default: the cluster's CPUs, at most the file count). Each task opens only the shards
its file reads, writes the file with the single-host code (temporary name, fsync, rename) and
returns its size and sha256; the driver journals it, streams progress (files, bytes, rate,
ETA) and, when all are done, writes side files, config, index and manifest (last) itself. So
the output is byte-identical to a single-host run for any task count.

Memory: each task's buffers are ``memory_budget / tasks / 4`` per buffer (three per task, as a
thread worker), and the task asks Ray for that much ``memory`` so a node never runs more tasks
than its memory holds. A worker process that dies (OOM kill, node loss) has its task retried
by Ray (``max_retries``); the retry rewrites the file from scratch under its temporary name.
An error that is ckpt's (bad source bytes, disk full) is not retried: the driver stops the
other tasks and removes their temporaries.

SRC and DST must be the same paths on every node (a shared file system).

Example::

    pool = RayPool(address=None, tasks=0)          # a local Ray, one task per CPU
    execute_plan(plan, catalog, dst, pool=pool)
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.errors import CkptError, OutputError, UsageError
from checkpoint_tool.execute.file_run import FileRun
from checkpoint_tool.execute.manifest import FileRecord
from checkpoint_tool.execute.open_source import open_sources
from checkpoint_tool.execute.progress import NullProgress
from checkpoint_tool.execute.runner import chunk_size
from checkpoint_tool.execute.tree import files_read
from checkpoint_tool.execute.writer import partial_name
from checkpoint_tool.plan.model import Plan

#: retries of a task whose worker process died
MAX_RETRIES = 3
#: test hook: the first task to create this file SIGKILLs its own worker after one tensor
KILL_ONCE_ENV = "CKPT_RAY_KILL_ONCE"


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise UsageError(
            "--executor ray needs Ray: pip install 'checkpoint-tool[ray]' (or pip install ray)"
        ) from exc
    return ray


def connect(address: str | None, *, num_cpus: int | None = None) -> Any:
    """Ray, initialised: a running session is reused; ``address`` joins a cluster; otherwise a
    local Ray is started (quietly: no dashboard)."""
    ray = import_ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        elif num_cpus:
            kwargs["num_cpus"] = num_cpus
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UsageError(f"--ray-address {address}: cannot connect to Ray ({first})") from exc
    return ray


def write_file_task(
    plan: Plan, catalog: Catalog, dst: str, index: int, chunk: int, durable: bool
) -> tuple[str, int, str]:
    """In a Ray worker: write plan file ``index`` into ``dst``; (name, size, sha256)."""
    ofile = plan.files[index]
    needed = files_read(catalog.tensors, [ofile])
    with open_sources(catalog, needed) as sources:
        progress = _KillOnce() if os.environ.get(KILL_ONCE_ENV) else NullProgress()
        run = FileRun(plan, sources, Path(dst), None, chunk, progress, durable)  # type: ignore[arg-type]
        rec = run.write_only(index)
    return rec.name, rec.size, rec.sha256


class _KillOnce(NullProgress):
    """Test hook: the first worker that gets here (marker file created) dies by SIGKILL."""

    def advance(self, nbytes: int) -> None:
        try:
            fd = os.open(os.environ[KILL_ONCE_ENV], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


class RayPool:
    """A ``FilePool`` (``execute.runner``) of Ray tasks, one per output file."""

    def __init__(
        self, address: str | None = None, tasks: int = 0, memory_budget: int = 1 << 30
    ) -> None:
        self.ray = connect(address)
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        self.workers = tasks or max(1, cpus)
        self.memory_budget = memory_budget

    def write(self, run: FileRun, todo: list[int]) -> None:
        if not todo:
            return
        ray = self.ray
        tasks = min(self.workers, len(todo))
        chunk = chunk_size(self.memory_budget, tasks)
        remote = ray.remote(write_file_task).options(
            max_retries=MAX_RETRIES,
            retry_exceptions=False,
            num_cpus=1,
            memory=4 * chunk + (64 << 20),
        )
        plan_ref, catalog_ref = ray.put(run.plan), ray.put(run.sources.catalog)
        pending = list(todo)
        flying: dict[Any, int] = {}
        try:
            while pending or flying:
                while pending and len(flying) < tasks:
                    i = pending.pop(0)
                    ref = remote.remote(plan_ref, catalog_ref, str(run.dst), i, chunk, run.durable)
                    flying[ref] = i
                ready, _ = ray.wait(list(flying), num_returns=1, timeout=1.0)
                for ref in ready:
                    name, size, sha = _result(ray, ref, run.dst / run.plan.files[flying[ref]].name)
                    i = flying.pop(ref)
                    run.record(i, FileRecord(name=name, size=size, sha256=sha), count_bytes=True)
        except BaseException:
            for ref in flying:
                ray.cancel(ref, force=True)
            _wait_gone(ray, list(flying))
            for i in flying.values():
                partial_name(run.dst / run.plan.files[i].name).unlink(missing_ok=True)
            raise


def _result(ray: Any, ref: Any, path: Path) -> tuple[str, int, str]:
    """The task's result; ckpt's own one-line errors come back as themselves, Ray's failures
    (a worker that died more than ``MAX_RETRIES`` times, a lost node) as one line."""
    try:
        return ray.get(ref)  # type: ignore[no-any-return]
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, CkptError):
            raise cause from None
        raise OutputError(f"{path}: the Ray task writing it failed ({_first(exc)}); rerun with "
                          "--resume") from exc  # fmt: skip
    except ray.exceptions.RayError as exc:
        raise OutputError(
            f"{path}: the Ray worker writing it died {MAX_RETRIES + 1} times ({type(exc).__name__}"
            "); check the node's memory and logs, then rerun with --resume"
        ) from exc


def _first(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


def _wait_gone(ray: Any, refs: list[Any], timeout: float = 30.0) -> None:
    """Wait (bounded) for cancelled tasks to stop, so their temporaries can be removed."""
    deadline = time.monotonic() + timeout
    while refs and time.monotonic() < deadline:
        _, refs = ray.wait(refs, num_returns=len(refs), timeout=1.0)
