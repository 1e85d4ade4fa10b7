"""The ``ckpt`` typer application: thin commands, one module each.

Each command module under ``checkpoint_tool.cli`` exposes ``register(app)``. Commands parse
options, call the library, and hand a pydantic report to ``cli.output`` for rendering.
User errors (``CkptError``) print one line on stderr and exit with their code.
"""

from __future__ import annotations

import importlib
import sys

import typer

from checkpoint_tool import __version__
from checkpoint_tool.errors import CkptError

#: command modules, in the order ``ckpt --help`` lists them
COMMAND_MODULES = [
    "demo",
    "synth",
    "inspect",
    "tensor",
    "plan",
    "convert",
    "verify",
    "validate",
    "recipes",
]

app = typer.Typer(
    name="ckpt",
    help=(
        "Make quantized MoE checkpoints (FP8 / MXFP4 / NVFP4) ready for vLLM, offline, and "
        "prove that they are.\n\n"
        "Examples:\n\n"
        "  ckpt demo\n\n"
        "  ckpt inspect /models/DeepSeek-R1 --tp 8\n\n"
        "  ckpt convert /models/quark-mxfp4 /out/model --tp 2\n\n"
        "  ckpt verify /out/model --source /models/quark-mxfp4\n\n"
        "  ckpt validate /out/model --format junit > report.xml"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ckpt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """ckpt: quantized MoE checkpoints for vLLM."""


for _name in COMMAND_MODULES:
    _module = importlib.import_module(f"checkpoint_tool.cli.{_name}")
    _module.register(app)


def main() -> None:
    """Console entry point: run the app, turning ``CkptError`` into one line and an exit code."""
    try:
        rc = app(standalone_mode=False)
    except CkptError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        # usage errors (bad option values, missing arguments) from typer's click layer: they
        # know how to print themselves in one block and carry their exit code (2)
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)
