"""``ckpt verify DST --source SRC``: prove a converted checkpoint against its source.

Exit codes: 0 passed, 1 a check failed (a tensor's bytes, a layer's numbers), 2 usage error or
unreadable input (no manifest for the lossless check, another source, bad options).
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from checkpoint_tool.cli import dist_options as dist
from checkpoint_tool.cli.output import OutputFormat, emit

HELP = """Prove a converted checkpoint against its source.

Lossless: every output tensor must be exactly the source bytes (and zero / neutral padding) the
conversion plan says (the plan is rebuilt from DST's ckpt-manifest.json). Numeric: sampled MoE
layers (default: one per distinct policy: fused or separate shared experts, padded or not, each
scheme) run through the bundled Triton MoE runtime from DST (fused slots, padding, TP partial
sums) and are compared with a float reference computed from SRC.

Exit code: 0 passed, 1 a check failed, 2 usage error or unreadable input.

Examples:

  ckpt verify /out/model --source /models/quark-mxfp4

  ckpt verify /out/model -s /models/R1 --layers 3,30,61 --tokens 64 --device cuda

  ckpt verify /shared/out -s ./src --no-numeric --part 0/4 -f json > v0.json   # ... 3/4

  ckpt verify /shared/out -s ./src --merge 'v*.json'

  ckpt verify /out/model -s ./src --no-numeric --format json > verify.json

  ckpt verify /out/model -s ./src --no-lossless --backend torch --tp 4

  ckpt verify /out/model -s ./src --allow-skipped    # accept layers that cannot run
"""


class DeviceOption(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class BackendOption(str, Enum):
    triton = "triton"
    torch = "torch"


class VerifyFormat(str, Enum):
    human = "human"
    json = "json"


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
                "--layers", help="MoE layers to run, e.g. 3,4 or 3-5 (default: one per policy)."
            ),
        ] = None,
        tokens: Annotated[
            int, typer.Option("--tokens", min=1, help="Random hidden states per layer.")
        ] = 16,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the hidden states.")] = 0,
        tp: Annotated[
            int | None,
            typer.Option(
                "--tp", min=1, help="TP ranks to run and sum (default: the conversion's --tp)."
            ),
        ] = None,
        device: Annotated[
            DeviceOption, typer.Option("--device", help="auto (cuda if visible), cpu or cuda.")
        ] = DeviceOption.auto,
        backend: Annotated[
            BackendOption,
            typer.Option(
                "--backend",
                help="triton (grouped GEMM; the interpreter on CPU) or torch (per-expert loop).",
            ),
        ] = BackendOption.triton,
        memory_budget: Annotated[
            str,
            typer.Option(
                "--memory-budget", help="Bytes compared at a time (lossless), e.g. 64MiB."
            ),
        ] = "32MiB",
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
        progress: Annotated[
            bool, typer.Option("--progress/--no-progress", help="Progress bar on a terminal.")
        ] = True,
        fmt: Annotated[
            VerifyFormat, typer.Option("--format", "-f", help="human or json.")
        ] = VerifyFormat.human,
        # issue 16: spread the lossless check (cli/dist_options.py)
        executor: dist.ExecutorOpt = dist.ExecutorOption.threads,
        ray_address: dist.RayAddressOpt = None,
        ray_tasks: dist.RayTasksOpt = 0,
        part: dist.PartOpt = None,
        merge: dist.MergeOpt = None,
    ) -> None:
        from checkpoint_tool.cli.plan import parse_layers
        from checkpoint_tool.execute.progress import RichProgress
        from checkpoint_tool.plan.sharding import parse_size
        from checkpoint_tool.verify import VerifyOptions, verify_checkpoint
        from checkpoint_tool.verify.render import render_human

        options = VerifyOptions(
            lossless=lossless,
            numeric=numeric,
            layers=parse_layers(layers),
            tokens=tokens,
            seed=seed,
            device=device.value,
            backend=backend.value,
            tp=tp,
            memory_budget=parse_size(memory_budget),
            max_mismatches=max_mismatches,
            allow_skipped=allow_skipped,
        )
        bar = (
            RichProgress(label="verify lossless", transient=True)
            if progress and sys.stderr.isatty()
            else None
        )
        if dist.verify_spread(executor, part, merge):  # issue 16: --part, --merge, Ray tasks
            spread_report, human = dist.run_verify(
                dst, source, executor=executor, ray_address=ray_address, ray_tasks=ray_tasks,
                part=part, merge=merge, lossless=lossless, numeric=numeric,
                memory_budget=options.memory_budget, max_mismatches=max_mismatches,
            )  # fmt: skip
            emit(spread_report, OutputFormat(fmt.value), human=human)
            if spread_report.exit_code:
                raise typer.Exit(spread_report.exit_code)
            return
        report = verify_checkpoint(dst, source, options, progress=bar)
        emit(report, OutputFormat(fmt.value), human=render_human)  # type: ignore[arg-type]
        if report.exit_code:
            raise typer.Exit(report.exit_code)
