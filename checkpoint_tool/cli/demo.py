"""``ckpt demo``: the whole pipeline on the embedded default, a tiny synthetic checkpoint.

Builds a small Quark hybrid checkpoint (block-FP8 attention, MXFP4 experts, per-layer mixed
shared experts), then runs inspect -> plan -> convert (TP=2) -> verify -> validate on it,
each step through the same command a user would type, so what the demo shows is what the
commands do. It ends in a real engine when one is installed: vLLM loads a converted BF16
twin at TP 2 and its prompt logprobs are compared with the source's (``demo_engine``).
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.rule import Rule

from checkpoint_tool.errors import EXIT_OK

HELP = (
    "Run the whole pipeline on a tiny synthetic checkpoint: synth, inspect, plan, convert, "
    "verify, validate.\n\nExample:\n\n  ckpt demo --workdir ./demo-out"
)

#: (title, argv template, exit codes that are expected, note shown when the step exits non-zero)
#: ``{src}``/``{dst}`` are filled in at run time
STEPS: list[tuple[str, str, set[int], str]] = [
    ("1. Build a tiny Quark hybrid checkpoint", "synth quark-hybrid {src} --seed 0", {0}, ""),
    (
        "2. Inspect: per-layer FSE policy and engine findings for TP=2 (headers only)",
        "inspect {src} --tp 2",
        {0, 1},
        "inspect exits 1 here on purpose: the *source* has findings. The TP errors are what "
        "convert fixes by padding. The per-layer FSE mix is what ckpt can write for an engine "
        "that fuses per layer (`--target vllm-per-layer-fse`); the default target, a stock "
        "vLLM, fuses none, so convert keeps the shared experts a separate MLP.",
    ),
    ("3. Plan the conversion (nothing is written)", "plan {src} --tp 2", {0}, ""),
    (
        "4. Convert for TP=2 (rename, FSE redirect, pad, reshard)",
        "convert {src} {dst} --tp 2",
        {0},
        "",
    ),
    (
        "5. Verify numerically against the source (Triton runtime)",
        "verify {dst} --source {src}",
        {0},
        "",
    ),
    ("6. Validate the output as a CI gate would", "validate {dst}", {0}, ""),
]


def register(app: typer.Typer) -> None:
    @app.command("demo", help=HELP)
    def demo(
        workdir: Annotated[
            Path | None,
            typer.Option(help="Folder for the demo checkpoints (default: a temporary folder)."),
        ] = None,
        vllm_python: Annotated[
            str | None,
            typer.Option(
                "--vllm-python",
                envvar="CKPT_VLLM_PYTHON",
                help="Python interpreter that has vLLM, for the last step (default: this one, "
                "then ./.venv-vllm; `make test-vllm` builds that).",
            ),
        ] = None,
        engine: Annotated[
            bool,
            typer.Option(
                "--engine/--no-engine", help="End by loading an output in vLLM when installed."
            ),
        ] = True,
    ) -> None:
        from checkpoint_tool.cli.app import app as root

        console = Console()
        with tempfile.TemporaryDirectory(prefix="ckpt-demo-") as tmp:
            work = Path(workdir) if workdir else Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            paths = {"src": str(work / "src"), "dst": str(work / "dst"), "work": str(work)}
            known = {c.name for c in root.registered_commands}
            failed = []
            for title, template, expected, note in STEPS:
                argv = shlex.split(template.format(**paths))
                if argv[0] not in known:
                    console.print(Rule(f"[dim]{title}: skipped ({argv[0]} not available)"))
                    continue
                if argv[0] in ("synth", "convert"):
                    argv.append("--overwrite")
                console.print(Rule(f"[bold]{title}"))
                console.print(f"[dim]$ ckpt {shlex.join(argv)}")
                code = _invoke(root, argv)
                if code not in expected:
                    failed.append((title, code))
                    console.print(f"[red]step exited with code {code}")
                elif code != EXIT_OK:
                    console.print(f"[yellow]exit {code} (expected).[/] {note}")
            if engine:
                _engine_step(root, console, work, vllm_python, failed)
            console.print(Rule())
            if failed:
                console.print(f"[red]demo finished with {len(failed)} failing step(s)")
                raise typer.Exit(1)
            where = (
                f"outputs in {work}"
                if workdir
                else "temporary outputs removed; pass --workdir DIR to keep them"
            )
            console.print(f"[green]demo finished: every step passed[/] ({where})")


def _engine_step(
    root: typer.Typer, console: Console, work: Path, python: str | None, failed: list
) -> None:
    from checkpoint_tool.cli.demo_engine import engine_check

    title = "7. Load in a real vLLM: a BF16 twin, converted for TP=2, vs its source"
    console.print(Rule(f"[bold]{title}"))

    def convert(src: Path, dst: Path) -> int:
        argv = ["convert", str(src), str(dst), "--tp", "2", "--overwrite", "--no-progress"]
        console.print(f"[dim]$ ckpt {shlex.join(argv)}")
        return _invoke(root, argv)

    check = engine_check(work, python, convert)
    if check.status == "skipped":
        console.print(f"[yellow]skipped:[/] {check.message}")
        return
    colour = "green" if check.status == "passed" else "red"
    console.print(f"[{colour}]{check.status}:[/] {check.message} ({check.seconds:.0f} s)")
    console.print(
        "[dim]vLLM's CPU build has no MXFP4/NVFP4 kernels: the MXFP4 output above is checked "
        "by ckpt's own runtime (step 5); see docs/vllm-proof.md[/]"
    )
    if check.status != "passed":
        failed.append((title, 1))


def _invoke(root: typer.Typer, argv: list[str]) -> int:
    """Run one ckpt command in-process and return its exit code."""
    from checkpoint_tool.errors import CkptError

    try:
        rc = root(argv, standalone_mode=False)
    except CkptError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except SystemExit as exc:
        return int(exc.code or 0)
    return rc if isinstance(rc, int) else EXIT_OK
