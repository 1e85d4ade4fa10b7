"""``ckpt inspect SRC``: the per-layer policy of a checkpoint from config.json and headers.

Reads only config.json (+ hf_quant_config.json), the index and the safetensors headers; never
tensor data. Prints, per MoE layer, the routed and shared schemes, whether the shared experts
can be fused into the routed GEMM (FSE) and why not, and the TP geometry; then the summary
in the reference engine's words and the findings. Exit code 0, or 1 when a finding is an
error (usable as a CI gate); 2 for unreadable input or bad options.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from checkpoint_tool.cli.options import FseOpt, InspectFormatOpt, SourceArg, TargetOpt, TpOpt
from checkpoint_tool.cli.output import emit
from checkpoint_tool.errors import EXIT_FINDINGS

HELP = (
    "Per-layer policy from config.json and safetensors headers only: routed/shared schemes, "
    "fused shared experts (FSE) per MoE layer with the reason, TP alignment and padding, and "
    "consistency findings. Exit 1 when a finding is an error.\n\n"
    "Examples:\n\n"
    "  ckpt inspect /models/DeepSeek-R1 --tp 8\n\n"
    "  ckpt inspect ./quark-hybrid --tp 2 --format json > policy.json\n\n"
    "  ckpt inspect hf://amd/DeepSeek-R1-MXFP4 --ep --fse on --format markdown\n\n"
    "  ckpt inspect ./quark-hybrid --tp 2 --format html > policy.html   # the layer map"
)


def register(app: typer.Typer) -> None:
    @app.command("inspect", help=HELP)
    def inspect(
        src: SourceArg,
        tp: TpOpt = 1,
        ep: Annotated[
            bool, typer.Option("--ep", help="Expert parallelism (experts not TP-split).")
        ] = False,
        eplb: Annotated[
            bool, typer.Option("--eplb", help="EP load balancer (needs --ep).")
        ] = False,
        all2all: Annotated[
            str | None,
            typer.Option("--all2all", help="All-to-all backend, e.g. nixl_ep, deepep_low_latency."),
        ] = None,
        fse: FseOpt = "auto",
        fmt: InspectFormatOpt = "human",
        target: TargetOpt = None,
        moe_backend: Annotated[
            str | None,
            typer.Option(
                "--moe-backend",
                help="Engine MoE backend (marlin, triton, flashinfer_trtllm, aiter, ...): "
                "per-rank intermediate round-up.",
            ),
        ] = None,
    ) -> None:
        from checkpoint_tool.cli.session import opened

        # the policy code is imported while a forked child parses headers (~0.2 s)
        with opened(src, meanwhile=_import_policy) as catalog:
            from checkpoint_tool.forked import spread_map
            from checkpoint_tool.policy import decide_policy
            from checkpoint_tool.policy.build import render_policy

            decision = decide_policy(
                catalog,
                tp=tp,
                ep=ep,
                eplb=eplb,
                all2all=all2all,
                fse=fse,
                target=target,
            )
            # the scheme findings of ~46k modules: half in a forked child (two cores)
            report = render_policy(decision, catalog, spread=spread_map)
        # engine section: what the target engine does with this checkpoint
        from checkpoint_tool.policy.engine.build import build_engine_report
        from checkpoint_tool.policy.report import with_engine

        engine = build_engine_report(catalog, decision, target, tp, moe_backend, ep, eplb, all2all)
        report = with_engine(report, engine)

        def human(r: Any, console: Any) -> None:
            from checkpoint_tool.policy.engine.render import render_engine_human
            from checkpoint_tool.policy.render import render_human

            render_human(r, console)
            render_engine_human(engine, console)

        def markdown(r: Any) -> str:
            from checkpoint_tool.policy.engine.render import render_engine_markdown
            from checkpoint_tool.policy.render import render_markdown

            return render_markdown(r) + render_engine_markdown(engine)

        def html(r: Any) -> str:  # the layer map, drawn from the report alone
            from checkpoint_tool.html.policy_page import render_policy_html

            return render_policy_html(r)

        emit(report, fmt, human=human, markdown=markdown, html=html)
        if report.has_errors:
            raise typer.Exit(EXIT_FINDINGS)


def _import_policy() -> None:
    import checkpoint_tool.policy
    import checkpoint_tool.policy.engine.build  # noqa: F401
