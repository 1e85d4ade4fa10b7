"""Options that spread one ``ckpt convert`` over many processes or machines (declared once).

``--executor ray [--ray-address A] [--ray-tasks N]``: each output file a Ray task.
``--part I/N``: write part I of N (an array-job task); ``--finalize``: check all N parts, write
the index and manifest. ``--merge`` (verify): one report from the part reports. This module
only declares the options; ``cli.spread`` runs them. See ``checkpoint_tool.execute.distributed``
and docs/convert.md.

Example::

    ckpt convert /models/R1 /shared/r1 --tp 8 --part $SLURM_ARRAY_TASK_ID/16
    ckpt convert /models/R1 /shared/r1 --tp 8 --finalize
    ckpt convert /models/R1 /shared/r1 --tp 8 --executor ray --ray-address auto
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer


class ExecutorOption(str, Enum):
    """Who writes the output files: threads of this process, or Ray tasks."""

    threads = "threads"
    ray = "ray"


ExecutorOpt = Annotated[
    ExecutorOption,
    typer.Option(
        "--executor",
        help="threads: --workers threads of this process; ray: one Ray task per output file "
        "(needs the ray extra: pip install checkpoint-tool\\[ray]; SRC and DST on a file system "
        "every node sees).",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--ray-address", help="Ray cluster to join (e.g. auto, ray://head:10001); default: local."
    ),
]
RayTasksOpt = Annotated[
    int,
    typer.Option(
        "--ray-tasks", min=0, help="Ray tasks in flight (0: the cluster's CPUs); shares the budget."
    ),
]
PartOpt = Annotated[
    str | None,
    typer.Option(
        "--part",
        help="Write only part I of N of the output files (I from 0, e.g. "
        "$SLURM_ARRAY_TASK_ID/8), then run --finalize once all parts are done.",
    ),
]
FinalizeOpt = Annotated[
    bool,
    typer.Option(
        "--finalize", help="Check every --part in DST, then write the index and manifest."
    ),
]


MergeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--merge",
        help="Merge `ckpt verify --part` JSON reports (repeat it, or give a quoted glob such as "
        "'v*.json') into one report and exit code; nothing is re-read.",
    ),
]
