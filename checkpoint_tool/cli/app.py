"""The ``ckpt`` typer application: thin commands, one module each.

Each command module under ``checkpoint_tool.cli`` exposes ``register(app)``. Commands parse
options, call the library, and hand a pydantic report to ``cli.output`` for rendering.
User errors (``CkptError``) print one line on stderr and exit with their code.
"""

from __future__ import annotations

import atexit
import importlib
import os
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

HELP = (
    "Make quantized MoE checkpoints (FP8 / MXFP4 / NVFP4) ready for vLLM, offline, and "
    "prove that they are.\n\n"
    "Examples:\n\n"
    "  ckpt demo\n\n"
    "  ckpt inspect /models/DeepSeek-R1 --tp 8\n\n"
    "  ckpt convert /models/quark-mxfp4 /out/model --tp 2\n\n"
    "  ckpt verify /out/model --source /models/quark-mxfp4\n\n"
    "  ckpt validate /out/model --format junit > report.xml"
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ckpt {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """ckpt: quantized MoE checkpoints for vLLM."""


def build_app(names: list[str] = COMMAND_MODULES) -> typer.Typer:
    """The ``ckpt`` app with the commands of ``names`` (in ``COMMAND_MODULES`` order).

    Command modules are imported strictly: a broken one fails loudly.
    """
    app = typer.Typer(
        name="ckpt",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    for name in COMMAND_MODULES:
        if name in names:
            importlib.import_module(f"checkpoint_tool.cli.{name}").register(app)
    return app


def _invoked_command(argv: list[str]) -> str | None:
    """The command module ``argv`` runs (``ckpt inspect ...`` -> ``"inspect"``), or None when it
    names none (``ckpt --help``, a typo: then every command is built, for help and errors)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMAND_MODULES else None
    return None


_full_app: list[typer.Typer] = []


def __getattr__(name: str) -> typer.Typer:
    """``from checkpoint_tool.cli.app import app`` (tests, embedding): every command."""
    if name == "app":
        if not _full_app:
            _full_app.append(build_app())
        return _full_app[0]
    raise AttributeError(name)


def main() -> None:
    """Console entry point: run the app, turning ``CkptError`` into one line and an exit code.

    Only the invoked command's module is imported (``ckpt inspect`` does not pay for the
    converter's or the runtime's imports); ``--help`` and unknown commands import them all.
    """
    command = _invoked_command(sys.argv[1:])
    try:
        rc = build_app([command] if command else COMMAND_MODULES)(standalone_mode=False)
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


def run() -> None:
    """The ``ckpt`` console script: ``main``, then a quick exit.

    A command like ``inspect`` leaves ~1M small objects (headers of 92k tensors) for the
    interpreter to free one by one at shutdown (~0.1 s on a full DeepSeek-R1). Once the
    command is done and its output flushed, the exit handlers run and the process ends
    without that teardown. An error inside the exit path falls back to the normal exit.
    """
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    else:  # main always exits; keep the normal path if that ever changes
        code = 0
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message") prints it, exit status 1
        print(code, file=sys.stderr)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
    except BaseException:
        sys.exit(code)
    os._exit(code)
