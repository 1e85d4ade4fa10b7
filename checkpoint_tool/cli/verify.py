"""``ckpt verify DST --source SRC``: prove a converted checkpoint against its source.

Exit codes: 0 passed, 1 a check failed (a tensor's bytes, a layer's numbers), 2 usage error or
unreadable input (no manifest for the lossless check, another source, bad options).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from checkpoint_tool.cli import dist_options as dist
from checkpoint_tool.cli.options import (
    FormatOpt,
    MemoryBudgetOpt,
    ProgressOpt,
    VerifyTpOpt,
    parse_layers,
)
from checkpoint_tool.cli.output import emit
from checkpoint_tool.cli.session import paused_gc
from checkpoint_tool.cli.spread import run_verify, verify_spread

HELP = """Prove a converted checkpoint against its source.

Lossless: every output tensor must be exactly the source bytes (and zero / neutral padding) the
conversion plan says (the plan is rebuilt from DST's ckpt-manifest.json). Numeric: sampled MoE
layers (default: one per distinct policy: fused or separate shared experts, padded or not, each
scheme) run through the bundled MoE runtime (Triton where installed, else PyTorch; the report
says which) from DST (fused slots, padding, TP partial sums) and are compared with a float
reference computed from SRC.

Exit code: 0 passed, 1 a check failed, 2 usage error or unreadable input.

Examples:

  ckpt verify /out/model --source /models/quark-mxfp4

  ckpt verify /out/model -s /models/R1 --layers 3,30,61 --tokens 64 --device cuda

  ckpt verify /out/model -s /models/R1 --layers all --max-seconds 600 -f json > v.json

  ckpt verify /shared/out -s ./src --no-numeric --part 0/4 -f json > v0.json   # ... 3/4

  ckpt verify /shared/out -s ./src --merge 'v*.json'

  ckpt verify /out/model -s ./src --no-numeric --format json > verify.json

  ckpt verify /out/model -s ./src --no-lossless --backend torch --tp 4

  ckpt verify /out/model -s ./src --allow-skipped    # accept layers that cannot run
"""


#: ``--device`` / ``--backend`` values, as ``VerifyOptions`` spells them (``--backend auto``
#: is resolved here, before the options are made)
Device = Literal["auto", "cpu", "cuda"]
Backend = Literal["auto", "triton", "torch"]


def pick_backend(backend: Backend) -> Literal["triton", "torch"]:
    """``auto``: triton where it is installed, else torch (a plain ``pip install`` brings no
    triton); the numeric report's ``backend`` names the one that ran.

    >>> pick_backend("torch")
    'torch'
    """
    if backend != "auto":
        return backend
    # found, not imported: the runtime imports triton itself, after choosing CPU interpretation
    return "triton" if importlib.util.find_spec("triton") is not None else "torch"


def register(app: typer.Typer) -> None:
    @app.command("verify", help=HELP)
    def verify(
        dst: Annotated[Path, typer.Argument(help="Output folder of `ckpt convert`.")],
        source: Annotated[
            str,
            typer.Option(
                "--source", "-s", help="The checkpoint DST was converted from (folder or repo id)."
            ),
        ],
        lossless: Annotated[
            bool,
            typer.Option("--lossless/--no-lossless", help="Compare every output tensor's bytes."),
        ] = True,
        numeric: Annotated[
            bool,
            typer.Option(
                "--numeric/--no-numeric", help="Run sampled MoE layers against the reference."
            ),
        ] = True,
        layers: Annotated[
            str | None,
            typer.Option(
                "--layers",
                metavar="all|sample|<layers>",
                help="MoE layers run numerically: sample (default: one per policy), all, or "
                "numbers like 3,4 or 3-5,7.",
            ),
        ] = None,
        tokens: Annotated[
            int, typer.Option("--tokens", min=1, help="Random hidden states per layer.")
        ] = 16,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the hidden states.")] = 0,
        tp: VerifyTpOpt = None,
        device: Annotated[
            Device, typer.Option("--device", help="auto (cuda if visible), cpu or cuda.")
        ] = "auto",
        backend: Annotated[
            Backend,
            typer.Option(
                "--backend",
                help="auto (triton where it is installed, else torch), triton (grouped GEMM; "
                "the interpreter on CPU) or torch (per-expert loop). The report names the one "
                "that ran.",
            ),
        ] = "auto",
        memory_budget: MemoryBudgetOpt = "32MiB",  # type: ignore[assignment]  # parsed to int
        max_mismatches: Annotated[
            int,
            typer.Option(
                "--max-mismatches", min=1, help="Mismatched tensors listed (counted all)."
            ),
        ] = 50,
        allow_skipped: Annotated[
            bool,
            typer.Option(
                "--allow-skipped",
                help="Pass even when a sampled layer cannot run numerically (listed in the "
                "report); by default a check that could not run fails.",
            ),
        ] = False,
        progress: ProgressOpt = True,
        fmt: FormatOpt = "human",
        # performance and scope of a long run (verify internals)
        workers: Annotated[
            int | None,
            typer.Option(
                "--workers",
                min=1,
                help="Threads of the lossless check (default: the usable cores, at most 8).",
            ),
        ] = None,
        max_seconds: Annotated[
            float | None,
            typer.Option(
                "--max-seconds",
                min=0.001,
                help="Time budget of the numeric check: layers beyond the policy sample "
                "(--layers all) start only while it allows; the sample always runs.",
            ),
        ] = None,
        # spread the lossless check (cli/dist_options.py, cli/spread.py)
        executor: dist.ExecutorOpt = dist.ExecutorOption.threads,
        ray_address: dist.RayAddressOpt = None,
        ray_tasks: dist.RayTasksOpt = 0,
        part: dist.PartOpt = None,
        merge: dist.MergeOpt = None,
    ) -> None:
        from checkpoint_tool.execute.progress import RichProgress
        from checkpoint_tool.verify import VerifyOptions, verify_checkpoint
        from checkpoint_tool.verify.render import render_human

        options = VerifyOptions(
            lossless=lossless,
            numeric=numeric,
            layers=_layers(layers),
            tokens=tokens,
            seed=seed,
            device=device,
            backend=pick_backend(backend),
            tp=tp,
            memory_budget=memory_budget,
            max_mismatches=max_mismatches,
            allow_skipped=allow_skipped,
            workers=workers,
            max_seconds=max_seconds,
        )
        bar = (
            RichProgress(label="verify lossless", transient=True)
            if progress and sys.stderr.isatty()
            else None
        )
        if verify_spread(executor, part, merge):  # --part, --merge, Ray tasks
            spread_report, human = run_verify(
                dst, source, executor=executor, ray_address=ray_address, ray_tasks=ray_tasks,
                part=part, merge=merge, lossless=lossless, numeric=numeric,
                memory_budget=options.memory_budget, max_mismatches=max_mismatches,
            )  # fmt: skip
            emit(spread_report, fmt, human=human)
            if spread_report.exit_code:
                raise typer.Exit(spread_report.exit_code)
            return
        with paused_gc():  # two catalogs, a plan and their findings: collected once, afterwards
            report = verify_checkpoint(dst, source, options, progress=bar,
                                       layer_progress=_layer_bar(progress))  # fmt: skip
        emit(report, fmt, human=render_human)  # type: ignore[arg-type]
        if report.exit_code:
            raise typer.Exit(report.exit_code)


def _layers(text: str | None) -> list[int] | Literal["all", "sample"] | None:
    """``--layers``: ``all`` / ``sample`` as given, else layer numbers (``3,4``, ``3-5,7``)."""
    if text is not None and text.strip() in ("all", "sample"):
        return text.strip()  # type: ignore[return-value]
    return parse_layers(text)


def _layer_bar(enabled: bool):  # type: ignore[no-untyped-def]
    """Per-layer numeric progress on a terminal (None otherwise)."""
    if not (enabled and sys.stderr.isatty()):
        return None
    from checkpoint_tool.verify.progress import RichLayerProgress

    return RichLayerProgress()
