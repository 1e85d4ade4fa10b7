"""Numeric check: the converted layer through the runtime equals the source layer's reference.

Per sampled MoE layer (``verify.sampling``):

1. seeded random hidden states ``x [tokens, H]`` (float32; bf16 for the Triton kernels on a
   GPU, as vLLM runs them; the torch backend stays float32 everywhere);
2. routing with each checkpoint's own router (gate weight, ``e_score_correction_bias``,
   config.json routing fields), on the CPU in float32 for both: tokens whose experts differ
   between source and converted router are counted;
3. only the experts the tokens chose are read, from both checkpoints (``layers.loader``);
4. reference: ``runtime.reference.moe_reference`` on the SOURCE (codec-decoded weights,
   float64 accumulation, shared experts as separate MLPs);
5. runtime: ``runtime.moe.run_moe`` on the CONVERTED layer (fused shared slots, padded
   intermediate, TP ``tp`` rank slices summed as the all-reduce would), ``backend`` triton
   (the Triton interpreter on CPU) or torch;
6. max abs error, max relative error, relative L2 error against the format's tolerance
   (``verify.tolerance``).

Layers are chosen by ``verify.sampling.select_layers`` (``--layers all|sample|N``); each is
read one layer ahead, in a thread, of the previous one's compute (``verify.layer_check``),
and on a GPU the reference is decoded and computed there. ``--max-seconds`` bounds the layers
beyond the policy sample.

The converted experts must also split evenly over the TP ranks (``I % (tp x alignment) == 0``)
as vLLM slices them; a layer that needs padding at run time fails.

Example::

    report = check_numeric(src_view, dst_view, NumericOptions(tokens=16, backend="torch"), tp=2)
    [(r.layer, r.status, f"{r.rel_error:.1e}") for r in report.layers]
    # [(1, 'passed', '2.1e-07'), (3, 'passed', '1.9e-07')]
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from functools import partial
from typing import Literal, Protocol

import torch

from checkpoint_tool.errors import UsageError
from checkpoint_tool.layers.loader import CheckpointView
from checkpoint_tool.verify.engram import check_engram
from checkpoint_tool.verify.layer_check import (
    Backend,
    Loaded,
    bf16_activations,
    compute_layer,
    load_layer,
)
from checkpoint_tool.verify.report import EngramResult, LayerResult, NumericReport
from checkpoint_tool.verify.sampling import (
    ConvertedView,
    LayerPolicy,
    LayerSelection,
    select_layers,
    selection_label,
)

Device = Literal["auto", "cpu", "cuda"]

DEFAULT_TOKENS = 16


class LayerProgress(Protocol):
    """Sees a numeric run layer by layer (``verify.progress``)."""

    def start(self, total: int) -> None: ...
    def layer_done(self, result: LayerResult) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class NumericOptions:
    layers: LayerSelection = None
    tokens: int = DEFAULT_TOKENS
    seed: int = 0
    device: Device = "auto"
    backend: Backend = "triton"
    #: a layer that cannot run is reported, not failed (``--allow-skipped``)
    allow_skipped: bool = False
    #: time budget of ``--layers all``: layers past the policy sample start while it allows
    max_seconds: float | None = None

    @classmethod
    def of(cls, options: object) -> NumericOptions:
        """The numeric fields of a wider options object (``VerifyOptions`` has them all):
        ``NumericOptions.of(VerifyOptions(tokens=32)).tokens`` -> ``32``."""
        return cls(**{f.name: getattr(options, f.name) for f in fields(cls)})


def resolve_device(device: Device) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cuda`` without one -> error."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is visible; use --device cpu or auto")
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--device {device!r}: choose auto, cpu or cuda")
    return device


def prepare_backend(backend: Backend, device: str) -> None:
    """Make the triton backend run where the tensors are (interpreter for CPU tensors)."""
    if backend == "torch":
        return
    if backend != "triton":
        raise UsageError(f"--backend {backend!r}: choose triton or torch")
    if device == "cpu" and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from checkpoint_tool.runtime.kernels import INTERPRETED

    if INTERPRETED != (device == "cpu"):
        mode = "interpreted (CPU)" if INTERPRETED else "compiled (GPU)"
        raise UsageError(
            f"--backend triton: triton already runs {mode} in this process, not on {device}; "
            f"use --backend torch or --device {'cpu' if INTERPRETED else 'cuda'}"
        )


def check_numeric(
    src: CheckpointView,
    dst: ConvertedView,
    options: NumericOptions,
    *,
    tp: int = 1,
    progress: LayerProgress | None = None,
) -> NumericReport:
    """Run the selected layers (see the module docstring); ``progress`` sees each one."""
    t0 = time.monotonic()
    if options.tokens < 1:
        raise UsageError(f"--tokens {options.tokens}: give 1 or more")
    if tp < 1:
        raise UsageError(f"--tp {tp}: give 1 or more")
    if options.max_seconds is not None and options.max_seconds <= 0:
        raise UsageError(f"--max-seconds {options.max_seconds}: give a positive number")
    device = resolve_device(options.device)
    prepare_backend(options.backend, device)
    required, extra = select_layers(src, dst, options.layers)
    results, not_run = _run_layers(src, dst, required, extra, options, device, tp, progress, t0)
    engram = (
        check_engram(src, dst, rows=options.tokens, seed=options.seed)
        if isinstance(dst, CheckpointView)
        else []
    )
    status, reason = numeric_status([*results, *engram], options.allow_skipped)
    if not_run and reason is None:
        reason = (
            f"--max-seconds {options.max_seconds:g}: {len(not_run)} of "
            f"{len(required) + len(extra)} selected layer(s) not run (every sampled policy ran)"
        )
    return NumericReport(
        status=status,
        reason=reason,
        ran_layers=[r.layer for r in results if r.status != "skipped"],
        skipped_layers=[r.layer for r in results if r.status == "skipped"],
        not_run_layers=not_run,
        selection=selection_label(options.layers),
        max_seconds=options.max_seconds,
        allow_skipped=options.allow_skipped,
        backend=options.backend,
        device=device,
        tp=tp,
        tokens=options.tokens,
        seed=options.seed,
        layers=results,
        engram=engram,
        seconds=round(time.monotonic() - t0, 3),
    )


def _run_layers(
    src: CheckpointView,
    dst: ConvertedView,
    required: list[LayerPolicy],
    extra: list[LayerPolicy],
    options: NumericOptions,
    device: str,
    tp: int,
    progress: LayerProgress | None,
    t0: float,
) -> tuple[list[LayerResult], list[int]]:
    """Each layer's reads run one layer ahead (a thread) of its compute; extra layers start
    while the time budget, judged by the slowest layer so far, allows one more."""
    bf16 = bf16_activations(options.backend, device)
    todo = [*required, *extra]
    results: list[LayerResult] = []
    if progress is not None:
        progress.start(len(todo))
    with ThreadPoolExecutor(1, thread_name_prefix="ckpt-read-ahead") as reader:
        on = None if device == "cpu" else device  # experts read straight onto the GPU
        load = partial(
            load_layer, src, dst, options=options, bf16=bf16, tp=tp, device=on,
            reference_device=device,
        )  # fmt: skip
        ahead: Future[Loaded] | None = reader.submit(load, todo[0]) if todo else None
        for i, _policy in enumerate(todo):
            assert ahead is not None
            loaded = ahead.result()
            nxt = i + 1
            ahead = None
            if nxt < len(todo) and _allowed(nxt, len(required), results, options, t0):
                ahead = reader.submit(load, todo[nxt])
            results.append(compute_layer(loaded, options, device, tp, dst))
            if progress is not None:
                progress.layer_done(results[-1])
            if ahead is None:
                break
    if progress is not None:
        progress.close()
    not_run = sorted(p.layer for p in todo[len(results) :])
    results.sort(key=lambda r: r.layer)
    return results, not_run


def _allowed(
    index: int, n_required: int, done: list[LayerResult], options: NumericOptions, t0: float
) -> bool:
    """Whether layer ``index`` of the selection starts: required ones always do."""
    if index < n_required or options.max_seconds is None:
        return True
    slowest = max((r.seconds for r in done), default=0.0)
    return time.monotonic() - t0 + 2 * slowest <= options.max_seconds


def numeric_status(
    results: Sequence[LayerResult | EngramResult], allow_skipped: bool
) -> tuple[str, str | None]:
    """The section's status and reason: a layer that could not run fails it unless allowed."""
    skipped = [r.layer for r in results if r.status == "skipped"]
    if any(r.status == "failed" for r in results):
        return "failed", None
    if skipped and not allow_skipped:
        layers = ",".join(map(str, skipped))
        return "failed", (
            f"layer(s) {layers} could not run (see their messages); a check that could not run "
            "is not a pass: pass --allow-skipped to accept it, or --no-numeric"
        )
    if len(skipped) == len(results):
        return "skipped", "no sampled layer could run (see layers; allowed by --allow-skipped)"
    note = f"layer(s) {','.join(map(str, skipped))} skipped (--allow-skipped)" if skipped else None
    return "passed", note
