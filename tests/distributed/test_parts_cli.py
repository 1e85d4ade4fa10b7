"""``ckpt convert --part I/N`` on every I, then ``--finalize``, through the real entry point:
the same DST bytes as one ``ckpt convert``; a missing part is one line, exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from checkpoint_tool.cli.app import main


def _run(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["ckpt", "convert", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


OPTS = ("--tp", "2", "--max-shard-size", "1MB", "--no-progress")


def test_parts_then_finalize_equal_one_host(monkeypatch, capsys, synth_ckpt, tmp_path):
    src = str(synth_ckpt("quark-hybrid"))
    code, _, err = _run(monkeypatch, capsys, src, str(tmp_path / "one"), *OPTS)
    assert code == 0, err
    one = _tree(tmp_path / "one")
    assert sum(n.endswith(".safetensors") for n in one) >= 3
    dst = tmp_path / "parts"
    for i in (2, 0):
        code, out, err = _run(monkeypatch, capsys, src, str(dst), *OPTS, "--part", f"{i}/3",
                              "--format", "json")  # fmt: skip
        assert code == 0, err
        assert json.loads(out)["part"] == i
    code, out, err = _run(monkeypatch, capsys, src, str(dst), *OPTS, "--finalize")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "part 1/3 is missing" in err
    code, out, err = _run(monkeypatch, capsys, src, str(dst), *OPTS, "--part", "1/3")
    assert code == 0 and "part 1/3" in out and "--finalize" in out, err
    code, out, err = _run(monkeypatch, capsys, src, str(dst), *OPTS, "--finalize")
    assert code == 0 and "converted" in out, err
    assert _tree(dst) == one


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--part", "0/2", "--finalize"), "exclude each other"),
        (("--part", "2/2"), "0 <= I < N"),
        (("--part", "0/2", "--overwrite"), "--overwrite does not combine"),
    ],
)
def test_bad_combinations_exit_2(monkeypatch, capsys, synth_ckpt, tmp_path, extra, message):
    src = str(synth_ckpt("quark-hybrid"))
    code, _, err = _run(monkeypatch, capsys, src, str(tmp_path / "o"), *OPTS, *extra)
    assert code == 2 and message in err
    assert not (tmp_path / "o").exists()


def test_executor_ray_without_ray_is_one_line(monkeypatch, capsys, synth_ckpt, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: import fails
    src = str(synth_ckpt("quark-hybrid"))
    code, _, err = _run(monkeypatch, capsys, src, str(tmp_path / "o"), *OPTS, "--executor", "ray")
    assert code == 2 and "pip install 'checkpoint-tool[ray]'" in err
    assert err.strip().count("\n") == 0 and not (tmp_path / "o").exists()
