"""The options several commands share are declared once (``cli/options.py``) and act the same.

Bad values are refused while the command line is parsed, before SRC is opened: the sources
below do not exist, so a check that moved back into a command body (or into the library)
would fail on the missing path instead, with another message.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import typer.main
from main_run import run_main as _run
from typer.testing import CliRunner

from checkpoint_tool.cli import options
from checkpoint_tool.cli.app import app

CLI = Path(options.__file__).parent

#: option names two command modules may both declare: the same spelling, another meaning
SAME_NAME_OTHER_MEANING = {
    "--layers": "synth: how many decoder layers to write (a count, not a list)",
    "--seed": "synth: the random data; verify: the hidden states",
    "--workers": "convert: output files written at once; verify: threads of the lossless check",
}


def _argv(command: str, tmp_path: Path) -> list[str]:
    """``command`` with its positional arguments (paths that do not exist)."""
    src, dst = str(tmp_path / "no-src"), str(tmp_path / "no-dst")
    return {
        "plan": ["plan", src],
        "inspect": ["inspect", src],
        "convert": ["convert", src, dst],
        "verify": ["verify", dst, "--source", src],
    }[command]


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, err
    return lines[0]


def _command_params(command: str) -> dict[str, Any]:
    cmd = typer.main.get_command(app).commands[command]
    return {opt: p for p in cmd.params for opt in getattr(p, "opts", [])}


@pytest.mark.parametrize("command", ["plan", "inspect", "convert", "verify"])
def test_tp_0_is_refused_by_every_command(monkeypatch, capsys, tmp_path, command):
    code, out, err = _run(monkeypatch, capsys, *_argv(command, tmp_path), "--tp", "0")
    assert code == 2 and out == ""
    # typer's own wording (typer < 0.29: "0 is not in the range x>=1.")
    assert _error_line(err) in (
        "Error: Invalid value for '--tp': Input should be greater than or equal to 1",
        "Error: Invalid value for '--tp': 0 is not in the range x>=1.",
    )


@pytest.mark.parametrize("command", ["plan", "convert"])
def test_pad_to_0_is_refused(monkeypatch, capsys, tmp_path, command):
    code, _, err = _run(monkeypatch, capsys, *_argv(command, tmp_path), "--pad-to", "0")
    assert code == 2 and "Invalid value for '--pad-to'" in _error_line(err)


@pytest.mark.parametrize(
    ("option", "value", "commands"),
    [
        ("--fse", "bogus", ["plan", "convert", "inspect"]),
        ("--layout", "sideways", ["plan", "convert"]),
    ],
)
def test_bad_choices_are_refused_the_same_way(
    monkeypatch, capsys, tmp_path, option, value, commands
):
    """A bad --fse / --layout gets the same one-line refusal from every command that takes it."""
    lines = set()
    for command in commands:
        code, out, err = _run(monkeypatch, capsys, *_argv(command, tmp_path), option, value)
        assert code == 2 and out == ""
        lines.add(_error_line(err))
    assert len(lines) == 1, lines
    assert f"Invalid value for '{option}'" in lines.pop()


_BAD_LAYERS = (
    ["--layers", "5-3"],
    "error: --layers '5-3': write layer numbers like 3,4 or 3-5,7\n",
)
_BAD_SIZE = "error: cannot read size 'lots'; write e.g. 5GB, 500MB, 4.5GiB or a number of bytes\n"


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("plan", *_BAD_LAYERS),
        ("convert", *_BAD_LAYERS),
        ("verify", *_BAD_LAYERS),
        ("plan", ["--max-shard-size", "lots"], _BAD_SIZE),
        ("convert", ["--max-shard-size", "lots"], _BAD_SIZE),
        ("convert", ["--memory-budget", "lots"], _BAD_SIZE),
        ("verify", ["--memory-budget", "lots"], _BAD_SIZE),
    ],
)
def test_bad_layers_and_sizes_are_one_line(monkeypatch, capsys, tmp_path, command, args, message):
    code, out, err = _run(monkeypatch, capsys, *_argv(command, tmp_path), *args)
    assert (code, out, err) == (2, "", message)


class _Stop(Exception):
    """Raised by the stand-ins below: the command got as far as the library call."""


def _options_reaching_the_library(monkeypatch, tmp_path, command: str, *args: str) -> Any:
    """The PlanOptions (plan, convert) or VerifyOptions (verify) ``ckpt COMMAND ARGS`` builds."""
    import checkpoint_tool.verify
    from checkpoint_tool.cli import session

    seen = []

    def fake_open_plan(src, options, **_):
        seen.append(options)
        raise _Stop

    def fake_verify(dst, source, options, **_):
        seen.append(options)
        raise _Stop

    monkeypatch.setattr(session, "open_plan", fake_open_plan)
    monkeypatch.setattr(checkpoint_tool.verify, "verify_checkpoint", fake_verify)
    result = CliRunner().invoke(app, [*_argv(command, tmp_path), *args])
    assert isinstance(result.exception, _Stop), result.output
    return seen[0]


@pytest.mark.parametrize("command", ["plan", "convert", "verify"])
def test_layers_parse_identically_everywhere(monkeypatch, tmp_path, command):
    for text, layers in (("3-5,7", [3, 4, 5, 7]), (" 7, 3-4 ,", [3, 4, 7]), ("", None)):
        got = _options_reaching_the_library(monkeypatch, tmp_path, command, "--layers", text)
        assert got.layers == layers


@pytest.mark.parametrize(
    ("command", "args", "field", "value"),
    [
        ("plan", [], "max_shard_size", 5 * 10**9),
        ("plan", ["--max-shard-size", "2MB"], "max_shard_size", 2_000_000),
        ("convert", ["--max-shard-size", "4GiB"], "max_shard_size", 4 << 30),
        ("verify", [], "memory_budget", 32 << 20),
        ("verify", ["--memory-budget", "1.5kB"], "memory_budget", 1500),
    ],
)
def test_sizes_are_parsed_by_the_option(monkeypatch, tmp_path, command, args, field, value):
    got = _options_reaching_the_library(monkeypatch, tmp_path, command, *args)
    assert getattr(got, field) == value


def test_plan_options_come_from_the_shared_options(monkeypatch, tmp_path):
    args = ["--tp", "4", "--fse", "off", "--layout", "vllm-sharded", "--pad-to", "64"]
    got = _options_reaching_the_library(monkeypatch, tmp_path, "convert", *args)
    assert (got.tp, got.fse, got.layout, got.pad_to) == (4, "off", "vllm-sharded", 64)


def _declared_options() -> dict[str, set[str]]:
    """option name -> the cli modules whose ``typer.Option(...)`` calls spell it."""
    found: dict[str, set[str]] = {}
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "typer.Option"):
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("-"):
                    for name in str(arg.value).split("/"):
                        found.setdefault(name, set()).add(path.name)
    return found


def test_tp_is_declared_only_in_the_options_module():
    """``"--tp"`` is also in demo.py, as an argument it passes: declarations are what count."""
    assert "--tp" in _declared_options(), "the scan found no --tp: it is broken"
    assert _declared_options()["--tp"] == {"options.py"}


def test_no_option_is_declared_in_two_modules():
    """A second declaration of an option belongs in options.py (or in the exception list)."""
    twice = {
        name: sorted(files)
        for name, files in _declared_options().items()
        if len(files) > 1 and name not in SAME_NAME_OTHER_MEANING
    }
    assert twice == {}


@pytest.mark.parametrize(
    ("option", "commands"),
    [
        ("--tp", ["plan", "convert", "inspect"]),
        ("--fse", ["plan", "convert", "inspect"]),
        ("--target", ["plan", "convert", "inspect", "validate"]),
        ("--format", ["plan", "convert", "tensor", "synth", "verify"]),
        ("--layers", ["plan", "convert"]),
        ("--overwrite", ["convert", "synth"]),
    ],
)
def test_shared_options_have_one_help_text(option, commands):
    helps = {_command_params(c)[option].help for c in commands}
    assert len(helps) == 1, helps
