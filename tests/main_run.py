"""Run ``ckpt`` in the test process, as a user types it (shared by the CLI tests).

Example::

    code, out, err = run_main(monkeypatch, capsys, "plan", str(src), "--format", "json")
"""

from __future__ import annotations

import sys

import pytest

from checkpoint_tool.cli.app import main


def run_main(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """Exit code, stdout and stderr of ``ckpt *argv`` (``cli.app.main``, which always exits)."""
    monkeypatch.setattr(sys, "argv", ["ckpt", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err
